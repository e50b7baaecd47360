package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// escapeByte (^]) ends a console session, as in virsh and telnet.
const escapeByte = 0x1d

// newConsoleCmd makes vlctl console, and under the name attach the same
// command: docker attach is where users of containers look for it.
func newConsoleCmd(name string) *cobra.Command {
	var n nameFlags
	short := "Attach to a guest's serial console; ^] detaches"
	long := name + ` attaches to the serial console of NAME, a VM that vlctl run runs on this
machine (NAMESPACE/NAME, or NAME when unique; vlctl ps lists them), a background one (vlctl run
-d) too, or to the console socket at the absolute path SOCKET (…/<uid>/virt-serial0). ^]
detaches; the VM runs on.`
	if name != "console" {
		short = "Attach to a VM's serial console, as docker attach does (the same as vlctl console); ^] detaches"
		long += "\n\n" + name + " is vlctl console under the name docker attach has."
	}
	cmd := &cobra.Command{
		Use:   name + " NAME|SOCKET",
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var conn net.Conn
			var err error
			if strings.HasPrefix(args[0], "/") {
				conn, err = net.Dial("unix", args[0])
			} else {
				conn, err = dialConsole(&n, args[0])
			}
			if err != nil {
				return fmt.Errorf("console: %w", err)
			}
			defer conn.Close()
			if restore, err := rawTerminal(int(os.Stdin.Fd()), false); err == nil {
				defer restore()
				fmt.Fprint(cmd.ErrOrStderr(), "Connected; escape character is ^]\r\n")
			}
			done := make(chan error, 2)
			go func() {
				_, err := io.Copy(cmd.OutOrStdout(), conn)
				done <- err
			}()
			go func() { done <- copyUntilEscape(conn, cmd.InOrStdin()) }()
			return <-done
		},
	}
	n.register(cmd)
	return cmd
}

// copyUntilEscape forwards input to the console until ^] or end of input.
func copyUntilEscape(w io.Writer, r io.Reader) error {
	buf := make([]byte, 1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if i := bytes.IndexByte(chunk, escapeByte); i >= 0 {
				_, werr := w.Write(chunk[:i])
				return werr
			}
			if _, werr := w.Write(chunk); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// rawTerminal puts a terminal into raw mode, so keys reach the guest as
// typed; it fails (and changes nothing) when fd is not a terminal.
func rawTerminal(fd int, keepOutput bool) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	if !keepOutput { // vlctl run keeps writing its own lines beside the console's
		raw.Oflag &^= unix.OPOST
	}
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
