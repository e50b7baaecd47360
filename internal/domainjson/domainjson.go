// Package domainjson builds the Domain object that virt-handler reads from
// GetDomain and from notify events (kubevirt-wire.md section 3): Go field
// names as JSON keys, lower-case keys only under ObjectMeta. (Being written.)
package domainjson

import "time"

// Domain is KubeVirt's api.Domain as JSON. (Fields being written.)
type Domain struct {
	Kind       string `json:"kind,omitempty"`
	APIVersion string `json:"apiVersion,omitempty"`
}

// Metadata is the launcher's in-memory metadata store for one domain.
type Metadata struct {
	UID                       string
	GracePeriodSeconds        int64
	DeletionTimestamp         *time.Time
	MarkedForGracefulShutdown *bool
}
