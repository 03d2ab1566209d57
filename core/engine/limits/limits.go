// Package limits holds runs to the configured sizes (execution.max_*,
// server.max_message): a request's code, timeout and environment checked
// before anything runs, each refusal with its rule, and a result cut to
// what one answer carries after.
package limits

import (
	"encoding/base64"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Rules a request's sizes can break (docs/audit.md).
const (
	RuleCodeEmpty    = "code-empty"
	RuleCodeSize     = "code-size"
	RuleCodeNUL      = "code-nul"
	RuleTimeout      = "timeout"
	RuleTimeoutMax   = "timeout-max"
	RuleEnvName      = "env-name"
	RuleEnvReserved  = "env-reserved"
	RuleEnvNUL       = "env-nul"
	RuleEnvValueSize = "env-value-size"
	RuleEnvTotalSize = "env-total-size"
)

// MaxImages bounds the images one result carries: each is a content block
// a client renders, and thousands of tiny ones fit under any byte limit.
const MaxImages = 20

// Limits are the configured sizes, parsed once.
type Limits struct {
	cfg                                     config.Execution
	code, output, image, envValue, envTotal int64
	message                                 int64 // server.max_message: one answer, encoded
}

// New reads the limits of cfg.
func New(cfg config.Config) Limits {
	return Limits{cfg: cfg.Execution, code: int64(cfg.Execution.MaxCodeSize), output: int64(cfg.Execution.MaxOutput), image: int64(cfg.Execution.MaxImageSize), message: int64(cfg.Server.MaxMessage),
		envValue: int64(cfg.Execution.MaxEnvValue), envTotal: int64(cfg.Execution.MaxEnvTotal)}
}

// Output and Image are what a backend may return of a run's output and
// of one image (execution.max_output, execution.max_image_size).
func (l Limits) Output() int64 { return l.output }
func (l Limits) Image() int64  { return l.image }

// Code refuses code that is empty (language: its name in messages), too
// large, or holds a NUL.
func (l Limits) Code(code, language string) error {
	if strings.TrimSpace(code) == "" {
		return refusal.New(RuleCodeEmpty, "code is empty: pass the %s source to run in the code argument", language)
	}
	if int64(len(code)) > l.code {
		return refusal.New(RuleCodeSize, "code is %d bytes, over the %s limit (execution.max_code_size); send less code, or load data from files", len(code), l.cfg.MaxCodeSize)
	}
	if i := strings.IndexByte(code, 0); i >= 0 {
		// No language takes a NUL in its source; a runner would only crash on it.
		return refusal.New(RuleCodeNUL, "code holds a NUL byte on line %d; remove it (write binary data with escapes such as \\x00)", strings.Count(code[:i], "\n")+1)
	}
	return nil
}

// Timeout refuses a timeout (seconds; 0: the default) that is negative
// or over the maximum of a call, or with background, of a job.
func (l Limits) Timeout(timeout int, background bool) error {
	if timeout < 0 {
		return refusal.New(RuleTimeout, "timeout %d: must be a positive number of seconds", timeout)
	}
	if max := l.cfg.MaxTimeout; timeout > max && !background {
		return refusal.New(RuleTimeoutMax, "timeout %d s exceeds the maximum %d s of a call (execution.max_timeout): pass background: true to run it as a job of up to %d s (execution.max_background_timeout)",
			timeout, max, l.cfg.MaxBackgroundTimeout)
	}
	if max := l.cfg.MaxBackgroundTimeout; timeout > max && background {
		return refusal.New(RuleTimeoutMax, "timeout %d s exceeds the maximum %d s of a background job (execution.max_background_timeout)", timeout, max)
	}
	return nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Env refuses environment variables a process could not hold or that
// exceed the limits. A refusal names the variable, never its value.
func (l Limits) Env(env map[string]string) error {
	// The caller is told which variable; the audit log is not (names too
	// may be secrets).
	refuse := func(rule, format string, args ...any) error {
		return &refusal.Error{Rule: rule, Msg: fmt.Sprintf(format, args...),
			Audit: fmt.Sprintf("environment refused by rule %s (%d variables; names and values are not recorded)", rule, len(env))}
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		switch {
		case !envName.MatchString(k):
			return refuse(RuleEnvName, "environment variable name %s is invalid: use letters, digits and '_', not starting with a digit (at most 128)", refusal.Quoted(k))
		case strings.HasPrefix(k, "FORGE_"):
			return refuse(RuleEnvReserved, "environment variable %s: the FORGE_ prefix is reserved for MCP-Forge", k)
		case strings.IndexByte(v, 0) >= 0:
			return refuse(RuleEnvNUL, "environment variable %s: its value contains a NUL byte, which no process environment can hold", k)
		case int64(len(v)) > l.envValue:
			return refuse(RuleEnvValueSize, "environment variable %s: its value is %d bytes, over the %s limit (execution.max_env_value); pass large data as a file or in the code", k, len(v), l.cfg.MaxEnvValue)
		}
		total += len(k) + len(v) + 2 // "=" and the terminating NUL
	}
	if int64(total) > l.envTotal {
		return refuse(RuleEnvTotalSize, "environment: %d variables take %d bytes, over the %s limit (execution.max_env_total)", len(env), total, l.cfg.MaxEnvTotal)
	}
	return nil
}

// Cap bounds a result to what one answer carries. stdout and stderr
// are cut where their JSON text reaches max_output: the plugin cut raw
// bytes, and a control byte takes six once escaped (1 MiB of them made a
// 12.5 MiB answer that the common clients refuse). Images are kept up to
// MaxImages and while their base64 fits in server.max_message beside the
// output (twice max_output, and a 32nd for the rest of the answer), the
// rest said in a notice. Cutting again is a no-op.
func (l Limits) Cap(res *backend.ExecuteResult) {
	if n := int(l.output); n > 0 {
		res.Stdout = sanitize.CutJSON(res.Stdout, n)
		res.Stderr = sanitize.CutJSON(res.Stderr, n)
		l.capText(res, n)
	}
	keep, total := 0, int64(0)
	room := l.message - 2*l.output - l.message/32
	for _, im := range res.Images {
		b := int64(base64.StdEncoding.EncodedLen(len(im.Data)))
		if keep == MaxImages || (l.message > 0 && total+b > room) {
			break
		}
		keep, total = keep+1, total+b
	}
	if n := len(res.Images); keep < n {
		res.Images = res.Images[:keep]
		res.Notices = append(res.Notices, fmt.Sprintf("the code produced %d images; the first %d are returned (at most %d, and %s in all once encoded: what server.max_message leaves beside the output): save the others as files or combine them",
			n, keep, MaxImages, config.FormatSize(max(room, 0))))
	}
}

// Bounds of a result's other text, counted as JSON: an error's message (a
// ValueError of 5 MB of control bytes was a 115 MiB answer: its message
// travels in the text, the error and the traceback) and its traceback,
// whose last lines (where it failed) are kept.
const (
	maxErrorMessage = 64 << 10
	maxTraceLine    = 16 << 10
	maxTraceback    = 256 << 10
)

// capText cuts what Cap's output cut leaves: the error, the value's
// forms (its repr at a quarter of max_output; its JSON dropped when larger,
// since cut JSON is no JSON) and rich output (max_output for all of it).
func (l Limits) capText(res *backend.ExecuteResult, maxOut int) {
	var cut []string
	if er := res.Error; er != nil {
		if m := sanitize.CutJSON(er.Message, maxErrorMessage); m != er.Message {
			er.Message, cut = m+" […]", append(cut, "the error's message")
		}
		total, keep := 0, len(er.Traceback)
		for i := len(er.Traceback) - 1; i >= 0; i-- {
			er.Traceback[i] = sanitize.CutJSON(er.Traceback[i], maxTraceLine)
			if total += sanitize.JSONLen(er.Traceback[i]); total > maxTraceback {
				break
			}
			keep = i
		}
		if keep > 0 {
			er.Traceback, cut = append([]string{"[…]\n"}, er.Traceback[keep:]...), append(cut, "the traceback's first lines")
		}
	}
	if r := sanitize.CutJSON(res.ResultRepr, maxOut/4); r != res.ResultRepr {
		res.ResultRepr, cut = r+" […]", append(cut, "the value's repr")
	}
	if sanitize.JSONLen(res.ResultJSON) > maxOut/4 {
		res.ResultJSON, cut = "", append(cut, "the value's JSON form")
	}
	room := maxOut
	keys := slices.Sorted(maps.Keys(res.Rich))
	slices.SortStableFunc(keys, func(a, b string) int { return sanitize.JSONLen(res.Rich[a]) - sanitize.JSONLen(res.Rich[b]) }) // the small ones whole
	for _, k := range keys {
		v := sanitize.CutJSON(res.Rich[k], max(room, 0))
		if v != res.Rich[k] {
			cut = append(cut, "rich output "+k)
		}
		if v == "" {
			delete(res.Rich, k)
		} else {
			res.Rich[k] = v
		}
		room -= sanitize.JSONLen(v)
	}
	if len(cut) > 0 {
		res.Notices = append(res.Notices, fmt.Sprintf("cut to fit one answer (execution.max_output %s, counted as JSON text): %s; print less, or write it to a file", config.FormatSize(int64(maxOut)), strings.Join(cut, ", ")))
	}
}
