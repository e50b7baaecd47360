package standalone

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// The launcher's Domain as the run reads it.

// domainStatus is the state of the launcher's Domain, NoState without one.
func domainStatus(ctx context.Context, c *cmdclient.Client) (string, error) {
	d, err := getDomain(ctx, c)
	if err != nil {
		return "", err
	}
	return domainState(d), nil
}

// getDomain asks the launcher for its Domain; nil when none is defined.
func getDomain(ctx context.Context, c *cmdclient.Client) (*domainjson.Domain, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, exists, err := c.GetDomain(gctx)
	if err != nil {
		return nil, fmt.Errorf("get domain: %w", err)
	}
	if !exists {
		return nil, nil
	}
	return d, nil
}

// domainState is the Domain's state, NoState without one.
func domainState(d *domainjson.Domain) string {
	if d == nil {
		return "NoState"
	}
	return string(d.Status.Status)
}

// guestReport is one line of what the guest agent put in the Domain's
// status: the OS, then each interface with its addresses ("" before the
// agent reported anything).
func guestReport(d *domainjson.Domain) string {
	if d == nil {
		return ""
	}
	var parts []string
	osi := d.Status.OSInfo
	if name := cmp.Or(osi.PrettyName, osi.Name); name != "" {
		parts = append(parts, name)
	}
	for _, i := range d.Status.Interfaces {
		ips := i.IPs
		if len(ips) == 0 && i.Ip != "" {
			ips = []string{i.Ip}
		}
		if len(ips) == 0 {
			continue
		}
		parts = append(parts, cmp.Or(i.InterfaceName, i.Mac)+" "+strings.Join(ips, " "))
	}
	return strings.Join(parts, "; ")
}
