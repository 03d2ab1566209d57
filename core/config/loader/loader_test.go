package loader

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// Keys are case-sensitive: the decoder would fill [server] from [Server],
// and with both in one file which one wins would depend on map order.
func TestKeysAreCaseSensitive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "forge.toml")
	for _, text := range []string{"[Server]\nport = 3001\n", "[server]\nPort = 3001\n", "[sErver]\nport = 3000\n[server]\nport = 3001\n"} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadWith(path, func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), "keys are case-sensitive") {
			t.Errorf("%q: %v", text, err)
		}
	}
	// Map keys keep their case: environment variable names are upper case.
	if err := os.WriteFile(path, []byte("[mcp_tools.mem]\ncommand = \"x\"\nenv = { API_TOKEN = \"t\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadWith(path, func(string) (string, bool) { return "", false }); err != nil {
		t.Errorf("upper-case map key refused: %v", err)
	}
}

func envOf(m map[string]string) config.Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaultsAreValid(t *testing.T) {
	if errs := config.Validate(config.Default()); len(errs) > 0 {
		t.Fatalf("defaults invalid: %v", errs)
	}
	cfg, err := LoadWith("", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, config.DefaultFor(os.Geteuid(), envOf(nil))) {
		t.Fatal("loading no file must give the defaults")
	}
}

// The example documents every option with its default value.
func TestExampleMatchesDefaults(t *testing.T) {
	path := filepath.Join("..", "..", "..", "forge.toml.example")
	cfg, err := LoadWith(path, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	// The example documents root's defaults (a non-root server's XDG paths
	// are in its comments).
	if !reflect.DeepEqual(cfg, config.DefaultFor(0, nil)) {
		t.Fatalf("forge.toml.example values differ from DefaultFor(0):\n%+v\n%+v", cfg, config.DefaultFor(0, nil))
	}
	var sink config.Config
	md, err := toml.DecodeFile(path, &sink)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, k := range md.Keys() {
		have[k.String()] = true
	}
	for _, p := range leafPaths(reflect.TypeOf(config.Config{}), "") {
		if !have[p] {
			t.Errorf("forge.toml.example does not document %s", p)
		}
	}
}

func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		p := join(prefix, tomlName(f))
		switch f.Type.Kind() {
		case reflect.Struct:
			out = append(out, leafPaths(f.Type, p)...)
		case reflect.Map:
		default:
			out = append(out, p)
		}
	}
	return out
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name string
		toml string
		env  map[string]string
		want []string // substrings, each must appear
	}{
		{"unknown key", "[execution]\nmax_timout = 5\n", nil, []string{"execution.max_timout: unknown key"}},
		{"unknown section", "[executon]\n", nil, []string{"executon: unknown key"}},
		{"max below default", "[execution]\ndefault_timeout = 300\nmax_timeout = 10\n", nil,
			[]string{"execution.max_timeout: must be >= execution.default_timeout (300), got 10"}},
		{"memory garbage", "[execution]\ndefault_memory = \"lots\"\n", nil, []string{`execution.default_memory: size "lots"`}},
		{"memory zero", "[execution]\nmax_memory = \"0m\"\n", nil, []string{`execution.max_memory: size "0m" must be greater than zero`}},
		{"memory max below default", "[execution]\ndefault_memory = \"1g\"\nmax_memory = \"512m\"\n", nil, []string{"execution.max_memory: must be >= execution.default_memory"}},
		{"cpu too big", "[execution]\nmax_cpu_quota = 2000000\n", nil, []string{"execution.max_cpu_quota: must be 1..1000000"}},
		{"cpu negative", "[execution]\ndefault_cpu_quota = -1\n", nil, []string{"execution.default_cpu_quota"}},
		{"port", "[server]\nport = 70000\n", nil, []string{"server.port: must be 1-65535"}},
		{"log level", "[server]\nlog_level = \"loud\"\n", nil, []string{"server.log_level: must be one of"}},
		{"wrong type", "[execution]\ndefault_timeout = \"300\"\n", nil, []string{"default_timeout"}},
		{"syntax", "[execution\n", nil, []string{"line 2"}},
		{"missing var", "[security]\naudit_log = \"${NOPE}/a.log\"\n", nil, []string{"security.audit_log: environment variable NOPE is not set"}},
		{"missing var in map", "[mcp_tools.gh]\ncommand = \"x\"\nenv = { T = \"${GH}\" }\n", nil, []string{"mcp_tools.gh.env.T: environment variable GH is not set"}},
		{"root user", "[security]\nsandbox_user = \"0:0\"\n", nil, []string{"security.sandbox_user: must not be root"}},
		{"bad user", "[security]\nsandbox_user = \"nobody\"\n", nil, []string{"security.sandbox_user: must be numeric"}},
		{"relative path", "[volumes]\nbase_path = \"data\"\n", nil, []string{"volumes.base_path: must be an absolute path"}},
		{"empty tool command", "[mcp_tools.gh]\nargs = []\n", nil, []string{"mcp_tools.gh.command: must not be empty"}},
		{"tool command and url", "[mcp_tools.gh]\ncommand = \"x\"\nurl = \"https://a.example/mcp\"\n", nil, []string{"mcp_tools.gh.url: command and url exclude"}},
		{"tool url scheme", "[mcp_tools.gh]\nurl = \"ftp://a.example\"\n", nil, []string{"mcp_tools.gh.url: \"ftp://a.example\" is not an http(s) URL"}},
		{"tool policy default", "[mcp_tools.gh]\ncommand = \"x\"\ndefault = \"maybe\"\n", nil, []string{"mcp_tools.gh.default: "}},
		{"tool policy glob", "[mcp_tools.gh]\ncommand = \"x\"\ndeny = [\"[\"]\n", nil, []string{"mcp_tools.gh.deny[0]: "}},
		{"bridge timeout", "[bridge]\ncall_timeout = 0\n", nil, []string{"bridge.call_timeout: "}},
		{"bad sha", "[plugins.x]\npath = \"/x\"\nsha256 = \"abc\"\n", nil, []string{"plugins.x.sha256: must be 64 hexadecimal"}},
		{"env not int", "", map[string]string{"FORGE_EXECUTION_MAX_TIMEOUT": "soon"}, []string{`execution.max_timeout: from FORGE_EXECUTION_MAX_TIMEOUT: "soon" is not an integer`}},
		{"env not bool", "", map[string]string{"FORGE_SECURITY_ALLOW_NETWORK": "maybe"}, []string{"security.allow_network"}},
		{"env breaks cross rule", "", map[string]string{"FORGE_EXECUTION_MAX_TIMEOUT": "5"}, []string{"execution.max_timeout: must be >= execution.default_timeout (300), got 5"}},
		{"all errors at once", "[execution]\nmax_timeout = 1\nmax_pids = 0\ntypo = 1\n[sessions]\nmax_concurrent = 0\n", nil,
			[]string{"execution.max_timeout", "execution.max_pids", "sessions.max_concurrent", "execution.typo: unknown key"}},
		{"history cells negative", "[sessions]\nhistory_cells = -1\n", nil, []string{"sessions.history_cells: must be between 0 (no history) and 10000, got -1"}},
		{"history cells too many", "[sessions]\nhistory_cells = 10001\n", nil, []string{"sessions.history_cells: must be between 0"}},
		{"history bytes over a message", "[sessions]\nhistory_bytes = \"9m\"\n", nil, []string{"sessions.history_bytes: must be between 64k and 8m"}},
		{"history bytes too small", "[sessions]\nhistory_bytes = \"1k\"\n", nil, []string{"sessions.history_bytes: must be between 64k and 8m"}},
		{"template empty", "[environment_builder.templates.ds]\ndescription = \"x\"\n", nil, []string{"environment_builder.templates.ds.packages"}},
		{"approved wildcard", "[environment_builder.package_validation]\napproved_packages = [\"numpy\", \"*-dev\"]\n", nil,
			[]string{`environment_builder.package_validation.approved_packages[1]: "*-dev" is not a package name`}},
		{"approved version", "", map[string]string{"FORGE_ENVIRONMENT_BUILDER_PACKAGE_VALIDATION_APPROVED_PACKAGES": "r:ggplot2, numpy>=1"},
			[]string{`environment_builder.package_validation.approved_packages[1]: "numpy>=1"`}},
		{"approved language", "[environment_builder.package_validation]\napproved_packages = [\"julia:x\"]\n", nil,
			[]string{"environment_builder.package_validation.approved_packages[0]"}},
		{"default backend language", "[execution.default_backend]\nPython = \"python\"\n", nil, []string{`execution.default_backend.Python: "Python" is not a language id`}},
		{"default backend plugin", "[sessions.default_backend]\npython = \"Jupyter!\"\n", nil, []string{"sessions.default_backend.python: name must be lower-case"}},
		{"default backend is a table", "[execution]\ndefault_backend = \"python\"\n", nil, []string{"default_backend"}},
		{"plugin languages", "[plugins.x]\npath = \"/x\"\nlanguages = [\"c++\"]\n", nil, []string{`plugins.x.languages[0]: "c++" is not a language id`}},
		{"env value over the kernel's limit", "[execution]\nmax_env_value = \"1m\"\nmax_env_total = \"1m\"\n", nil, []string{"execution.max_env_value: must be at most 128k"}},
		{"env total over the limit", "[execution]\nmax_env_total = \"2m\"\n", nil, []string{"execution.max_env_total: must be at most 1m"}},
		{"progress interval zero", "[execution]\nprogress_interval = 0\n", nil, []string{"execution.progress_interval: must be 1-30 seconds"}},
		{"progress interval over a client timeout's half", "[execution]\nprogress_interval = 31\n", nil, []string{"execution.progress_interval: must be 1-30 seconds"}},
		{"env total below value", "[execution]\nmax_env_value = \"64k\"\nmax_env_total = \"32k\"\n", nil, []string{"execution.max_env_total: must be >= execution.max_env_value"}},
		{"removed image keys", "[images]\npython = \"mcp-forge/python:3.11\"\n", nil, []string{"images.python: unknown key"}},
		{"transport", "[server]\ntransport = \"grpc\"\n", nil, []string{"server.transport: must be one of stdio, http"}},
		{"log format", "[server]\nlog_format = \"xml\"\n", nil, []string{"server.log_format: must be one of text, json"}},
		{"tls half", "[server]\ntls_cert = \"/etc/c.pem\"\n", nil, []string{"server.tls_cert: tls_cert and tls_key go together"}},
		{"body below code", "[server]\nmax_request_body = \"1m\"\n", nil, []string{"server.max_request_body: must be >= execution.max_code_size"}},
		{"origin", "[server]\nallowed_origins = [\"example.com\"]\n", nil, []string{"server.allowed_origins[0]"}},
		{"admin addr", "[server]\nadmin_addr = \"9090\"\n", nil, []string{"server.admin_addr"}},
		{"no body deadline", "[server]\nrequest_body_timeout = 0\n", nil, []string{"server.request_body_timeout: must be > 0"}},
		{"quota zero", "[quotas]\nmax_sessions = 0\n", nil, []string{"quotas.max_sessions: must be > 0"}},
		{"tenant no key", "[tenants.alice]\nmax_sessions = 2\n", nil, []string{"tenants.alice.api_key_sha256: must list at least one key hash"}},
		{"tenant raw key", "[tenants.alice]\napi_key_sha256 = [\"hunter2\"]\n", nil, []string{"tenants.alice.api_key_sha256[0]: must be the sha256"}},
		{"tenant shared key", "[tenants.alice]\napi_key_sha256 = [\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]\n[tenants.bob]\napi_key_sha256 = [\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]\n", nil, []string{`tenants.bob.api_key_sha256[0]: the same key hash is also a key of tenant "alice"`}},
		{"tenant name", "[tenants.Alice]\napi_key_sha256 = [\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]\n", nil, []string{"tenants.Alice: name must be"}},
		{"jwt incomplete", "[tenants.alice]\n[auth.jwt]\njwks_file = \"/etc/jwks.json\"\n", nil, []string{"auth.jwt.issuer: must not be empty", "auth.jwt.audience: must not be empty"}},
		{"jwt no tenants", "[auth.jwt]\njwks_file = \"/etc/jwks.json\"\nissuer = \"https://i\"\naudience = \"forge\"\n", nil, []string{"auth.jwt: JWTs name tenants"}},
		{"metadata without jwt", "[auth.jwt]\nresource_url = \"https://forge.example/mcp\"\n", nil, []string{"auth.jwt.resource_url: needs a key source"}},
		{"builder name", "[environment_builder]\nbuilder = \"../uv\"\n", nil, []string{"environment_builder.builder: name must be"}},
		{"security scan", "[environment_builder]\nsecurity_scan = \"maybe\"\n", nil, []string{"environment_builder.security_scan: must be one of auto, required, off"}},
		{"scan severity", "[environment_builder]\nscan_fail_on = [\"critical\"]\n", nil, []string{`environment_builder.scan_fail_on[0]: "critical" is not a trivy severity`}},
		{"uv cache relative", "[environment_builder]\nuv_cache_path = \"cache\"\n", nil, []string{"environment_builder.uv_cache_path: must be an absolute path"}},
		{"storage age", "[environment_builder.storage]\nmax_age_days = -1\n", nil, []string{"environment_builder.storage.max_age_days: must be >= 0"}},
		{"size substitution", "[execution]\nmax_output = \"${OUT}\"\n", map[string]string{"OUT": "lots"}, []string{`execution.max_output: size "lots" is not a number with k, m or g, like "512m"`}},
		{"size not a string", "[execution]\nmax_output = 1048576\n", nil, []string{`line 2 (last key "execution.max_output")`}},
		{"size env", "", map[string]string{"FORGE_SECURITY_TMPFS_SIZE": "0"}, []string{`security.tmpfs_size: size "0" must be greater than zero`}},
		{"every size error at once", "[execution]\ndefault_memory = \"lots\"\nmax_code_size = \"0\"\n[volumes]\nsession_quota = \"-1g\"\n", map[string]string{"FORGE_SECURITY_AUDIT_MAX_SIZE": "big"},
			[]string{`execution.default_memory: size "lots"`, `execution.max_code_size: size "0"`, `volumes.session_quota: size "-1g"`, `security.audit_max_size: size "big"`}},
		{"storage size", "[environment_builder.storage]\nmax_size = \"lots\"\n", nil, []string{"environment_builder.storage.max_size: size \"lots\""}},
		{"storage below an image", "[environment_builder]\nmax_image_size = \"2g\"\n[environment_builder.storage]\nmax_size = \"1g\"\n", nil, []string{"environment_builder.storage.max_size: must be >= environment_builder.max_image_size"}},
		{"find links relative", "[environment_builder]\nfind_links = [\"wheels\"]\n", nil, []string{"environment_builder.find_links[0]"}},
		{"tenant share over the store", "[sessions]\ncheckpoint_store_quota = \"1g\"\n[tenants.alice]\napi_key_sha256 = [\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]\ncheckpoint_quota_mb = 2048\n", nil, []string{"tenants.alice.checkpoint_quota_mb: 2048 MiB is more than the whole store"}},
		{"tenant negative", "[tenants.alice]\napi_key_sha256 = [\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]\nmax_concurrent_runs = -1\n", nil, []string{"tenants.alice.max_concurrent_runs: must be >= 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "forge.toml")
			if err := os.WriteFile(path, []byte(tc.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadWith(path, envOf(tc.env))
			if err == nil {
				t.Fatal("expected an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestPriorityAndSubstitution(t *testing.T) {
	text := `
[execution]
default_timeout = 60
max_timeout = 120
max_output = "${OUT}"
[security]
audit_log = "${LOGDIR}/audit.log"
[mcp_tools.gh]
command = "${BIN}/gh-mcp"
args = ["--token", "${TOKEN}"]
env = { GITHUB_TOKEN = "${TOKEN}" }
[plugins.x]
path = "/opt/x"
config = { image = "${IMG}", nested = { deep = "${IMG}" } }
`
	path := filepath.Join(t.TempDir(), "forge.toml")
	os.WriteFile(path, []byte(text), 0o600)
	env := envOf(map[string]string{
		"LOGDIR": "/srv/log", "BIN": "/usr/local/bin", "TOKEN": "s3cret", "IMG": "mcp-forge/custom:x", "OUT": "2m",
		"FORGE_VOLUMES_SESSION_QUOTA":  "1536m",
		"FORGE_EXECUTION_MAX_TIMEOUT":  "900",
		"FORGE_IMAGES_ALLOWED":         "mcp-forge/python:*, mcp-forge/r:*",
		"FORGE_SECURITY_ALLOW_NETWORK": "false",
	})
	cfg, err := LoadWith(path, env)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"file over default", cfg.Execution.DefaultTimeout, 60},
		{"env over file", cfg.Execution.MaxTimeout, 900},
		{"default kept", cfg.Execution.DefaultMemory, config.Size(512 << 20)},
		{"substituted", cfg.Security.AuditLog, "/srv/log/audit.log"},
		{"size substituted", cfg.Execution.MaxOutput, config.Size(2 << 20)},
		{"size from env", cfg.Volumes.SessionQuota, config.Size(1536 << 20)},
		{"in map", cfg.MCPTools["gh"].Command, "/usr/local/bin/gh-mcp"},
		{"in slice", cfg.MCPTools["gh"].Args[1], "s3cret"},
		{"in map of strings", cfg.MCPTools["gh"].Env["GITHUB_TOKEN"], "s3cret"},
		{"in plugin config", cfg.Plugins["x"].Config["image"], "mcp-forge/custom:x"},
		{"nested plugin config", cfg.Plugins["x"].Config["nested"].(map[string]any)["deep"], "mcp-forge/custom:x"},
		{"env list", cfg.Images.Allowed, []string{"mcp-forge/python:*", "mcp-forge/r:*"}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestMissingFile(t *testing.T) {
	_, err := LoadWith(filepath.Join(t.TempDir(), "nope.toml"), envOf(nil))
	if err == nil || !strings.Contains(err.Error(), "nope.toml") {
		t.Fatalf("want an error naming the file, got %v", err)
	}
}

// A file's [network] reaches its user with the field paths, and the
// environment overrides the lists.
func TestNetworkLoad(t *testing.T) {
	file := "[network]\nallowed_hosts = [\"*\", \"ok.example.org\"]\nallowed_cidrs = [\"10.1.0.0/8\"]\nmax_upload = \"lots\"\n" +
		"[network.tenants.ghost]\nallowed_hosts = [\"a.example.org\"]\n"
	path := filepath.Join(t.TempDir(), "forge.toml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadWith(path, envOf(nil))
	if err == nil {
		t.Fatal("expected an error")
	}
	for _, w := range []string{`network.allowed_hosts[0]: "*" alone would match every host`, "network.allowed_cidrs[0]: \"10.1.0.0/8\" has bits set past its prefix length: write 10.0.0.0/8",
		"network.max_upload:", `network.tenants.ghost: no tenant "ghost" is configured`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	good := filepath.Join(t.TempDir(), "forge.toml")
	if err := os.WriteFile(good, []byte("[network]\nmax_download = \"10m\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadWith(good, envOf(map[string]string{"FORGE_NETWORK_ALLOWED_HOSTS": "pypi.org, files.pythonhosted.org:443"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Network.AllowedHosts, " "); got != "pypi.org files.pythonhosted.org:443" || cfg.Network.MaxDownload != 10<<20 {
		t.Errorf("got hosts %q, max_download %d", got, cfg.Network.MaxDownload)
	}
}

// Loading with no file as a non-root user gives the XDG paths, and FORGE_*
// still overrides them.
func TestLoadUsesUserDefaults(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("needs a non-root euid; DefaultFor covers the logic as root")
	}
	cfg, err := LoadWith("", envOf(map[string]string{"HOME": "/home/u", "FORGE_SECURITY_AUDIT_LOG": "/a.log"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Volumes.BasePath != "/home/u/.local/share/mcp-forge" || cfg.Security.AuditLog != "/a.log" {
		t.Fatalf("got %q %q", cfg.Volumes.BasePath, cfg.Security.AuditLog)
	}
}

// The same checks reach a file's user with the field's path.
func TestRuntimeLoadErrors(t *testing.T) {
	file := "[runtime]\nkind = \"kubernetes\"\n[runtime.kubernetes]\nnamespace = \"Forge\"\npull_policy = \"sometimes\"\nmemory_request = \"0\"\n" +
		"[[runtime.kubernetes.tolerations]]\nkey = \"a\"\noperator = \"Exists\"\nvalue = \"b\"\n"
	path := filepath.Join(t.TempDir(), "forge.toml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadWith(path, envOf(nil))
	if err == nil {
		t.Fatal("expected an error")
	}
	for _, w := range []string{`runtime.kubernetes.namespace: "Forge" is not a namespace name`, `runtime.kubernetes.pull_policy: must be one of Always, IfNotPresent, Never (got "sometimes")`,
		`runtime.kubernetes.memory_request: size "0" must be greater than zero`, "runtime.kubernetes.tolerations[0].value: a toleration with operator Exists takes no value"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	if _, err := LoadWith(path, envOf(map[string]string{"FORGE_RUNTIME_KUBERNETES_NAMESPACE": "forge", "FORGE_RUNTIME_KUBERNETES_PULL_POLICY": "Never"})); err == nil ||
		strings.Contains(err.Error(), "namespace") || strings.Contains(err.Error(), "pull_policy") {
		t.Errorf("the environment's values replace the file's: %v", err)
	}
}
