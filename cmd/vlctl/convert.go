package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newConvertCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "convert FILE",
		Short: "Print the libvirt domain XML for a VMI manifest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("convert: not supported yet")
		},
	}
}
