package loader

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"

	"github.com/BurntSushi/toml"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// tenantsFile is what server.tenants_file may hold: [tenants.NAME] tables
// and nothing else, so that a file kept apart for its secrets (a
// Kubernetes Secret mounted into the core's pod) cannot change the rest of
// the configuration.
type tenantsFile struct {
	Tenants map[string]config.Tenant `toml:"tenants"`
}

// maxTenantsFile bounds the tenants file: thousands of tenants fit.
const maxTenantsFile = 4 << 20

// readRegular reads a regular file of at most max bytes. Anything else (a
// FIFO, which would block the load, or /dev/zero, which never ends) is
// refused before it is opened; links are followed, as a mounted Secret's are.
func readRegular(path string, max int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return data, nil
}

// mergeTenantsFile adds the tenants of server.tenants_file to raw's
// [tenants]. A name in both is an error: which one holds would otherwise
// depend on the order of loading.
func mergeTenantsFile(raw reflect.Value) config.Errors {
	path := raw.FieldByName("Server").FieldByName("TenantsFile").String()
	if path == "" {
		return nil
	}
	const field = "server.tenants_file"
	fail := func(format string, args ...any) config.Errors {
		return config.Errors{{Path: field, Msg: fmt.Sprintf(format, args...)}}
	}
	if !filepath.IsAbs(path) {
		return fail("%q must be an absolute path", path)
	}
	data, err := readRegular(path, maxTenantsFile)
	if err != nil {
		return fail("%v (the file of [tenants.NAME] tables; unset it to keep tenants in forge.toml)", err)
	}
	var f tenantsFile
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return fail("%s: %v", path, err)
	}
	var errs config.Errors
	for _, k := range md.Undecoded() {
		errs = append(errs, config.FieldError{Path: field, Msg: fmt.Sprintf("%s: unknown key %s (the file holds [tenants.NAME] tables only)", path, k)})
	}
	have := raw.FieldByName("Tenants")
	if have.IsNil() {
		have.Set(reflect.MakeMap(have.Type()))
	}
	names := make([]string, 0, len(f.Tenants))
	for name := range f.Tenants {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if have.MapIndex(reflect.ValueOf(name)).IsValid() {
			errs = append(errs, config.FieldError{Path: field, Msg: fmt.Sprintf("%s: tenant %q is also in forge.toml's [tenants]: keep each tenant in one place", path, name)})
			continue
		}
		have.SetMapIndex(reflect.ValueOf(name), reflect.ValueOf(f.Tenants[name]))
	}
	return errs
}
