#!/bin/sh
# Regenerates the Go code for the wire protocols (the command and notify
# sockets, and the hook sidecars' sockets) from the .proto files.
# Needs Debian's protoc (protobuf-compiler) and the two Go plugins, at the
# versions the committed code was made with:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
set -eu
cd "$(dirname "$0")"
PATH="$PATH:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin:/usr/local/go/bin"
export PATH
for f in cmdinfo/cmdinfo.proto cmd/v1/cmd.proto notifyinfo/notifyinfo.proto notify/v1/notify.proto \
	hooks/info/info.proto hooks/v1alpha1/v1alpha1.proto hooks/v1alpha2/v1alpha2.proto hooks/v1alpha3/v1alpha3.proto; do
	protoc -I . \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative \
		"$f"
done
