package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/relay"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
)

// vlctl vnc and screenshot show the guest's display: QEMU's VNC server on
// its unix socket in the run dir, and the launcher's GetScreenshot.

// vncLimits bound the viewers of one vlctl vnc.
var vncLimits = relay.Limits{MaxConns: 8, Idle: time.Hour}

func newVNCCmd() *cobra.Command {
	var n nameFlags
	var listen string
	var allowRemote bool
	cmd := &cobra.Command{
		Use:   "vnc NAME [--listen ADDR:PORT]",
		Short: "Serve the guest's VNC display on a local TCP port for a VNC viewer",
		Long: `vnc serves the guest's graphical console (QEMU's VNC server, on its unix socket in the
run dir) on a TCP port, as virtctl vnc --proxy-only does, and prints the address to give a VNC
viewer (vncviewer 127.0.0.1:PORT, remmina, ...). It runs until Ctrl-C or the VM's run ends.
--listen is 127.0.0.1 with a free port unless given. VNC carries no password and no
encryption here: anyone who reaches the port has the guest's screen and keyboard. So on
loopback a viewer that is another user's process than root's or that of the user who ran sudo
is refused (the owner of its socket, as /proc/net/tcp lists it); an address other than
loopback is refused unless --allow-remote is given as well, and then whoever reaches the port
gets the display. NAME is NAMESPACE/NAME, or NAME alone when only one
namespace has a VM of that name.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ap, err := netip.ParseAddrPort(listen)
			if err != nil {
				return fmt.Errorf("vnc: --listen %q: %w (want ADDR:PORT, e.g. 127.0.0.1:5900)", listen, err)
			}
			if !ap.Addr().IsLoopback() && !allowRemote {
				return fmt.Errorf("vnc: --listen %s: not a loopback address; VNC has no password or encryption here, so give --allow-remote too if other machines may have the guest's screen and keyboard", listen)
			}
			e, err := n.find(args[0])
			if err != nil {
				return err
			}
			sock, err := vncSocket(e)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", ap.String())
			if err != nil {
				return fmt.Errorf("vnc: --listen %s: %w", listen, err)
			}
			r := relay.NewLimited(vncLimits, func(what string, err error) {
				fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: %s: %v\n", what, err)
			})
			defer r.Close()
			r.Serve(l, "vnc of "+e.FullName(), func(c net.Conn) (net.Conn, error) {
				if !allowRemote {
					if err := localViewer(c); err != nil {
						return nil, err
					}
				}
				return dialVNC(e, sock)
			})
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", l.Addr())
			fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: the VNC display of %s is at %s (vncviewer %s); Ctrl-C ends\n", e.FullName(), l.Addr(), l.Addr())
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return waitRunOrDone(ctx, e)
		},
	}
	n.register(cmd)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "where viewers connect (ADDR:PORT; port 0: a free one)")
	cmd.Flags().BoolVar(&allowRemote, "allow-remote", false, "allow a --listen address other than loopback")
	return cmd
}

// localViewer refuses a viewer that is a process of another user than
// root or the one who ran sudo: anyone on this machine reaches a loopback
// port, and the display is the guest's screen and keyboard.
func localViewer(c net.Conn) error {
	peer, ok1 := c.RemoteAddr().(*net.TCPAddr)
	self, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return fmt.Errorf("a viewer at %s refused: not a TCP connection", c.RemoteAddr())
	}
	uid, err := procfs.TCPOwner("/proc", peer.AddrPort(), self.AddrPort())
	if err != nil {
		return fmt.Errorf("a viewer at %s refused: its owner: %w", peer, err)
	}
	if uid == 0 || strconv.FormatUint(uint64(uid), 10) == os.Getenv("SUDO_UID") {
		return nil
	}
	return fmt.Errorf("a viewer at %s refused: a process of uid %d, neither root nor the user who ran vlctl", peer, uid)
}

// vncSocket is the VNC socket of the run's guest.
func vncSocket(e *runrecord.Entry) (string, error) {
	if e.VMI == nil {
		return "", fmt.Errorf("%s: its record has no VMI", e.FullName())
	}
	return layout.Under(e.WorkDir).VNCSocket(string(e.VMI.UID)), nil
}

// dialVNC connects to the guest's VNC socket, refusing one that a process
// of the run does not serve (the VM's user can change its directory).
func dialVNC(e *runrecord.Entry, sock string) (net.Conn, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connect to the guest's VNC server: %w", err)
	}
	if err := e.PeerOwnedBy(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// waitRunOrDone returns when ctx ends (nil: Ctrl-C) or the run does.
func waitRunOrDone(ctx context.Context, e *runrecord.Entry) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		if !e.Alive() {
			return fmt.Errorf("%s: its vlctl run (pid %d) ended", e.FullName(), e.PID)
		}
	}
}

func newScreenshotCmd() *cobra.Command {
	var n nameFlags
	var out string
	cmd := &cobra.Command{
		Use:   "screenshot NAME FILE.png | screenshot NAME -o FILE.png",
		Short: "Save the guest's screen as a PNG image",
		Long: `screenshot saves what the guest's primary display shows as a PNG file, as virtctl
vnc screenshot does: the launcher takes it through libvirt (GetScreenshot). The file is the
second argument or -o FILE; - writes it to standard output; an existing FILE is replaced once the whole image has come. NAME is
NAMESPACE/NAME, or NAME alone when only one namespace has a VM of that name.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				if out != "" {
					return errors.New("screenshot: give the file once: -o FILE or a second argument")
				}
				out = args[1]
			}
			if out == "" {
				return errors.New("screenshot: give the file to write: -o FILE.png (- for standard output)")
			}
			e, err := n.find(args[0])
			if err != nil {
				return err
			}
			if e.VMI == nil {
				return fmt.Errorf("%s: its record has no VMI", e.FullName())
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			c, err := dialLauncher(ctx, e)
			if err != nil {
				return err
			}
			defer c.Close()
			mime, data, err := c.Screenshot(ctx, e.VMI)
			if err != nil {
				return fmt.Errorf("screenshot of %s: %w", e.FullName(), err)
			}
			img, err := asPNG(mime, data)
			if err != nil {
				return fmt.Errorf("screenshot of %s: %w", e.FullName(), err)
			}
			if out == "-" {
				_, err := cmd.OutOrStdout().Write(img)
				return err
			}
			return replaceFile(out, func(w io.Writer) error {
				_, err := w.Write(img)
				return err
			})
		},
	}
	n.register(cmd)
	cmd.Flags().StringVarP(&out, "output", "o", "", "the PNG file to write (- for standard output)")
	return cmd
}

// asPNG returns the image as PNG: libvirt passes on what QEMU wrote, PNG,
// or PPM from a QEMU built without PNG.
func asPNG(mime string, data []byte) ([]byte, error) {
	switch mime {
	case "image/png":
		if _, err := png.DecodeConfig(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("the PNG image: %w", err)
		}
		return data, nil
	case "image/x-portable-pixmap":
		img, err := decodePPM(data)
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := png.Encode(&b, img); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	return nil, fmt.Errorf("an image of type %q, neither PNG nor PPM", mime)
}

// decodePPM reads a binary PPM (P6, 8 bits a sample), as QEMU's
// screendump writes it.
func decodePPM(data []byte) (image.Image, error) {
	r := bufio.NewReader(bytes.NewReader(data))
	var magic string
	var w, h, maxval int
	if _, err := fmt.Fscan(r, &magic, &w, &h, &maxval); err != nil || magic != "P6" {
		return nil, fmt.Errorf("the PPM image's header: %q, %v (want P6, width, height, maxval)", magic, err)
	}
	if _, err := r.ReadByte(); err != nil { // the one blank after maxval
		return nil, fmt.Errorf("the PPM image's header: %w", err)
	}
	if w <= 0 || h <= 0 || w > 1<<14 || h > 1<<14 || maxval != 255 {
		return nil, fmt.Errorf("a PPM image of %dx%d, maxval %d: want at most 16384x16384, maxval 255", w, h, maxval)
	}
	pix := make([]byte, 3*w*h)
	if _, err := io.ReadFull(r, pix); err != nil {
		return nil, fmt.Errorf("the PPM image's pixels: %w", err)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < w*h; i++ {
		img.Set(i%w, i/w, color.RGBA{pix[3*i], pix[3*i+1], pix[3*i+2], 255})
	}
	return img, nil
}

// replaceFile writes path through a new file beside it (0644), which
// write fills and which is renamed over path once complete: a failure
// leaves nothing half written, and an existing file as it was.
func replaceFile(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".vlctl-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	defer tmp.Close()
	if err := write(tmp); err != nil {
		return err
	}
	if err := errors.Join(tmp.Chmod(0o644), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
