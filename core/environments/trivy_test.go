package environments

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
)

func TestParseTrivyRecorded(t *testing.T) {
	data, err := os.ReadFile("testdata/trivy-image.json")
	if err != nil {
		t.Fatal(err)
	}
	fs, err := ParseTrivy(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 4 || fs[0].ID != "CVE-2023-45853" || fs[0].Severity != "CRITICAL" || fs[0].Package != "zlib1g" ||
		fs[1].Severity != "HIGH" || fs[1].Fixed != "2023.7.22" || fs[3].Severity != "LOW" {
		t.Fatalf("%+v", fs)
	}
	if bad := Failing(fs, []string{"CRITICAL"}); len(bad) != 1 {
		t.Fatal(bad)
	}
	if bad := Failing(fs, []string{"CRITICAL", "HIGH"}); len(bad) != 2 {
		t.Fatal(bad)
	}
	for _, in := range []string{`{"SchemaVersion": 1, "Results": []}`, `not json`, `{}`} {
		if _, err := ParseTrivy([]byte(in)); err == nil {
			t.Errorf("%s: parsed", in)
		}
	}
}

type fakeScanner struct {
	there bool
	data  string
	err   error
}

func (f fakeScanner) Available() (string, bool) { return "/usr/bin/trivy", f.there }
func (f fakeScanner) Scan(context.Context, string) ([]Finding, error) {
	if f.err != nil {
		return nil, f.err
	}
	return ParseTrivy([]byte(f.data))
}

func TestScanPolicy(t *testing.T) {
	rec, _ := os.ReadFile("testdata/trivy-image.json")
	clean := `{"SchemaVersion":2,"Results":[{"Target":"x","Vulnerabilities":[{"VulnerabilityID":"CVE-1","PkgName":"p","Severity":"LOW"}]}]}`
	for _, tc := range []struct {
		name, mode string
		sc         fakeScanner
		rule, scan string
	}{
		{"critical refused", "auto", fakeScanner{there: true, data: string(rec)}, RuleScan, ""},
		{"clean", "auto", fakeScanner{there: true, data: clean}, "", "1 findings, none of CRITICAL"},
		{"no trivy", "auto", fakeScanner{}, "", "not scanned: trivy is not on PATH"},
		{"required without trivy", "required", fakeScanner{}, RuleScan, ""},
		{"scan fails closed", "auto", fakeScanner{there: true, err: errors.New("db missing")}, RuleScan, ""},
		{"off", "off", fakeScanner{there: true, data: string(rec)}, "", "not scanned: environment_builder.security_scan is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, func(c *config.EnvironmentBuilder) { c.SecurityScan = tc.mode })
			r.svc.o.Scanner = tc.sc
			res, err := r.svc.Build(context.Background(), Request{Name: "x", Packages: []string{"rich"}, Client: "o"})
			if tc.rule != "" {
				if refusedBy(t, err) != tc.rule || len(r.im.tagged()) != 0 || r.im.next != len(r.im.removed) {
					t.Fatalf("%v tagged %v", err, r.im.tagged())
				}
				if tc.name == "critical refused" && !strings.Contains(err.Error(), "CVE-2023-45853") {
					t.Fatal(err)
				}
				return
			}
			if err != nil || !strings.Contains(res.Scan, tc.scan) {
				t.Fatalf("%v %q", err, res.Scan)
			}
		})
	}
}
