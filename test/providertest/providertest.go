// Package providertest lets a test binary serve the stands provider: the engine links the binary it
// runs in as pulumi-resource-stands (engine/provider), the real binary and a test binary alike. It
// is a package of its own so that the tests that never run the engine link no Pulumi (test/archtest).
package providertest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stands-engine/stands-reconciler/engine/provider"
)

// Main is a TestMain for packages whose tests run the engine: started as pulumi-resource-stands,
// the test binary serves the provider instead of running the tests.
func Main(m *testing.M, opts ...provider.Option) {
	if filepath.Base(os.Args[0]) == provider.BinaryName {
		if err := provider.Serve(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", provider.BinaryName, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
