//go:build tools

package tools

import _ "github.com/goreleaser/nfpm/v2/cmd/nfpm"
