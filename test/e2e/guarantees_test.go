package e2e

// Runtime guarantees end to end: a real Podman runtime made to report one
// guarantee missing (this host enforces them all) refuses every sandbox
// through MCP, audited with the rule's name, unless the operator waives
// it by name; a waived run says so in its result and its audit line, and
// doctor's line for the guarantee reads waived.

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

var scriptedGap = runtime.Gap{Guarantee: runtime.Pids, Why: "scripted missing by the e2e test", Fix: "nothing to fix: the test scripts it"}

func auditText(t *testing.T, p *testenv.InProcess) string {
	t.Helper()
	b, err := os.ReadFile(p.Forge.Config.Security.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func doctorGuarantees(t *testing.T, p *testenv.InProcess) string {
	t.Helper()
	var buf bytes.Buffer
	doctor.Run(context.Background(), &buf, p.Forge.Guarantees())
	return buf.String()
}

func TestMissingGuaranteeRefusesThroughMCP(t *testing.T) {
	p := testenv.NewInProcessLacking(t, nil, scriptedGap)
	cs := p.Connect(t)
	var o out
	res := testenv.Call(t, cs, "execute_python", map[string]any{"code": "print('must not run')"}, &o)
	text := testenv.Text(res)
	if !res.IsError || !strings.Contains(text, "guarantee-missing") || !strings.Contains(text, "pids: scripted missing by the e2e test") ||
		!strings.Contains(text, `security.waive = ["pids"]`) || strings.Contains(o.Stdout, "must not run") {
		t.Fatalf("want an error result naming the rule, pids and its waiver; got isError=%v %q", res.IsError, text)
	}
	if log := auditText(t, p); !strings.Contains(log, `"guarantee":"pids"`) || !strings.Contains(log, `"rule":"guarantee-missing"`) {
		t.Fatalf("audit log has no guarantee-missing line for pids:\n%s", log)
	}
	if left := testenv.Containers(t, p.Forge.Config.Volumes.BasePath, false); len(left) > 0 {
		t.Fatalf("refused, yet containers exist: %v", left)
	}
	if d := doctorGuarantees(t, p); !strings.Contains(d, "FAIL  guarantee pids") || !strings.Contains(d, `or waive it: security.waive = ["pids"]`) ||
		!strings.Contains(d, "ok    guarantee memory") {
		t.Fatalf("doctor:\n%s", d)
	}
}

func TestWaivedGuaranteeRunsWithNotice(t *testing.T) {
	p := testenv.NewInProcessLacking(t, func(c *config.Config) { c.Security.Waive = []string{"pids"} }, scriptedGap)
	cs := p.Connect(t)
	var o out
	res := testenv.Call(t, cs, "execute_python", map[string]any{"code": "print(6*7)"}, &o)
	if res.IsError || o.Stdout != "42\n" {
		t.Fatalf("waived run: isError=%v %q", res.IsError, testenv.Text(res))
	}
	want := "guarantees not enforced for this run: pids (scripted missing by the e2e test; waived by security.waive[0]: " + runtime.Pids.Waiving() + ")"
	if !hasNotice(o, want) {
		t.Fatalf("notices %q lack %q", o.Notices, want)
	}
	// lifetime-bound: an in-process core has no watchdog, and testenv waives it.
	if log := auditText(t, p); !strings.Contains(log, `"waived":["pids","lifetime-bound"]`) {
		t.Fatalf("no container.create line records the waiver:\n%s", log)
	}
	if d := doctorGuarantees(t, p); !strings.Contains(d, "warn  guarantee pids") || !strings.Contains(d, "waived by security.waive[0]") {
		t.Fatalf("doctor:\n%s", d)
	}
}
