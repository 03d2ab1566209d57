package environments

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
)

// RuleScan is a refusal by the security scan.
const RuleScan = "security_scan"

// Finding is one vulnerability trivy reported.
type Finding struct {
	ID        string `json:"id"`
	Package   string `json:"package"`
	Installed string `json:"installed"`
	Fixed     string `json:"fixed,omitempty"`
	Severity  string `json:"severity"`
	Title     string `json:"title,omitempty"`
	Target    string `json:"target,omitempty"`
}

// trivyReport is the part of `trivy image --format json` (schema 2) read.
type trivyReport struct {
	SchemaVersion int    `json:"SchemaVersion"`
	ArtifactName  string `json:"ArtifactName"`
	Results       []struct {
		Target          string `json:"Target"`
		Class           string `json:"Class"`
		Type            string `json:"Type"`
		Vulnerabilities []struct {
			VulnerabilityID  string `json:"VulnerabilityID"`
			PkgName          string `json:"PkgName"`
			InstalledVersion string `json:"InstalledVersion"`
			FixedVersion     string `json:"FixedVersion"`
			Severity         string `json:"Severity"`
			Title            string `json:"Title"`
		} `json:"Vulnerabilities"`
	} `json:"Results"`
}

// ParseTrivy reads trivy's JSON report into findings, most severe first.
func ParseTrivy(data []byte) ([]Finding, error) {
	var r trivyReport
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("trivy report: %w", err)
	}
	if r.SchemaVersion != 2 {
		return nil, fmt.Errorf("trivy report: schema version %d, expected 2 (a trivy this version of MCP-Forge does not know)", r.SchemaVersion)
	}
	var out []Finding
	for _, res := range r.Results {
		for _, v := range res.Vulnerabilities {
			out = append(out, Finding{ID: v.VulnerabilityID, Package: v.PkgName, Installed: v.InstalledVersion, Fixed: v.FixedVersion,
				Severity: strings.ToUpper(v.Severity), Title: v.Title, Target: res.Target})
		}
	}
	rank := map[string]int{"CRITICAL": 0, "HIGH": 1, "MEDIUM": 2, "LOW": 3, "UNKNOWN": 4}
	sort.SliceStable(out, func(i, j int) bool {
		ri, ok := rank[out[i].Severity]
		if !ok {
			ri = 5
		}
		rj, ok := rank[out[j].Severity]
		if !ok {
			rj = 5
		}
		return ri < rj
	})
	return out, nil
}

// Failing are the findings of a severity in failOn.
func Failing(findings []Finding, failOn []string) []Finding {
	var out []Finding
	for _, f := range findings {
		if slices.Contains(failOn, f.Severity) {
			out = append(out, f)
		}
	}
	return out
}

// Scanner scans an image; ok is false when no scanner is available.
type Scanner interface {
	Available() (string, bool)
	Scan(ctx context.Context, image string) ([]Finding, error)
}

// Trivy runs the trivy binary found on PATH against the local Podman.
type Trivy struct{}

// Available says where trivy is.
func (Trivy) Available() (string, bool) {
	p, err := exec.LookPath("trivy")
	return p, err == nil
}

// Scan runs `trivy image` on a local image, offline (no database update:
// no container and no scan reaches the network here).
func (t Trivy) Scan(ctx context.Context, image string) ([]Finding, error) {
	p, ok := t.Available()
	if !ok {
		return nil, fmt.Errorf("trivy is not on PATH")
	}
	cmd := exec.CommandContext(ctx, p, "image", "--image-src", "podman", "--format", "json", "--quiet", "--skip-db-update", "--", image)
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			msg += ": " + strings.TrimSpace(string(ee.Stderr))
		}
		return nil, fmt.Errorf("trivy image %s: %s", image, msg)
	}
	return ParseTrivy(out)
}
