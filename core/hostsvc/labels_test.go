package hostsvc

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// A plugin names its run with the label host.LabelRun; Create prefixes a
// plugin's labels with runtime.LabelPluginPrefix, and the sandbox manager
// audits runtime.LabelRun. core/runtime cannot import the sdk's module, so
// this binds its spelling to the sdk's.
func TestRunLabelIsThePluginsLabel(t *testing.T) {
	t.Parallel()
	if got := runtime.LabelPluginPrefix + host.LabelRun; got != runtime.LabelRun {
		t.Errorf("a plugin's run label lands as %q, but the sandbox manager reads %q", got, runtime.LabelRun)
	}
}
