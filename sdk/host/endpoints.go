package host

import (
	"path"
	"strings"
)

// MaxEndpoints bounds the endpoints of one intent.
const MaxEndpoints = 16

// EndpointPlaces checks the intent's endpoints and says where each socket
// lies in the workspace: name → path relative to the workspace (through
// the mount whose target holds it). An endpoint must be named by
// EndpointName, once, and its Path must be a clean absolute path strictly
// beneath the target of a writable mount (the sandbox creates the socket
// there). The core and sdktest.LocalHost refuse an intent that fails this
// with KindInvalid.
func EndpointPlaces(in Intent) (map[string]string, error) {
	if len(in.Endpoints) > MaxEndpoints {
		return nil, Errorf(KindInvalid, "intent declares %d endpoints, over the %d allowed", len(in.Endpoints), MaxEndpoints)
	}
	out := make(map[string]string, len(in.Endpoints))
	for i, e := range in.Endpoints {
		if !EndpointName.MatchString(e.Name) {
			return nil, Errorf(KindInvalid, "endpoints[%d].name %q: use 1-32 lower-case letters, digits or '-', starting with a letter", i, e.Name)
		}
		if _, dup := out[e.Name]; dup {
			return nil, Errorf(KindInvalid, "endpoints[%d].name %q is declared twice", i, e.Name)
		}
		if !path.IsAbs(e.Path) || path.Clean(e.Path) != e.Path {
			return nil, Errorf(KindInvalid, "endpoints[%d] %q: path %q must be a clean absolute path in the container", i, e.Name, e.Path)
		}
		rel, ok := "", false
		for _, m := range in.Mounts {
			under, found := strings.CutPrefix(e.Path, strings.TrimSuffix(m.Target, "/")+"/")
			if !found || m.ReadOnly {
				continue
			}
			rel, ok = path.Join(path.Clean("/"+m.Subdir), under)[1:], true
			break
		}
		if !ok {
			return nil, Errorf(KindInvalid, "endpoints[%d] %q: path %q is not beneath the target of a writable mount of the intent; put the socket in a mounted workspace directory", i, e.Name, e.Path)
		}
		out[e.Name] = rel
	}
	return out, nil
}
