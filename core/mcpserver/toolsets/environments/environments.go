// Package environments is the custom environments toolset:
// build_environment (with the user's approval of packages that need it,
// asked as an input request), list_environments, delete_environment and
// the resource listing them with the templates.
package environments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	"github.com/mcp-forge/mcp-forge/core/route"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
)

// Builds is where the environment tools, and execute's custom_image,
// find the environment service: set before serving, or, with Service nil,
// why there is none.
type Builds struct {
	Service *environments.Service
	Reason  string
}

// service is the environment service, or the failure to answer without it.
func (b *Builds) service() (*environments.Service, error) {
	if b.Service == nil {
		return nil, toolsets.Unavailable("custom environments are not available: " + b.Reason)
	}
	return b.Service, nil
}

// Languages names the languages execute tools run, for the description.
type Languages func() []route.Language

type tools struct {
	env toolsets.Env
	b   *Builds
	q   *questions
}

// BuildEnvironmentInput is build_environment's input.
type BuildEnvironmentInput struct {
	Name        string   `json:"name" jsonschema:"the environment's name: 1-63 letters, digits and hyphens; the image is mcp-forge/custom:<name>"`
	Packages    []string `json:"packages,omitempty" jsonschema:"package specs (PEP 508 subset: name, [extras], version constraints, e.g. \"numpy>=1.24,<2\"); added to the template's"`
	Template    string   `json:"template,omitempty" jsonschema:"a configured template to start from (see mcp://forge/environments/list)"`
	Language    string   `json:"language,omitempty" jsonschema:"python (default) or r"`
	BaseImage   string   `json:"base_image,omitempty" jsonschema:"the image to build on; default: the language's sandbox image"`
	Description string   `json:"description,omitempty" jsonschema:"what the environment is for, kept in its labels"`
}

// PackageVersion is a resolved package.
type PackageVersion struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// BuildEnvironmentOutput is build_environment's structured result.
type BuildEnvironmentOutput struct {
	Success        bool                `json:"success"`
	Image          string              `json:"image,omitempty" jsonschema:"pass it as custom_image to an execute_<language> tool"`
	Packages       []PackageVersion    `json:"packages,omitempty" jsonschema:"every installed package with its version, dependencies included"`
	SizeBytes      int64               `json:"size_bytes,omitempty" jsonschema:"the whole image, base included"`
	BuildTime      float64             `json:"build_time,omitempty" jsonschema:"seconds"`
	CacheHit       bool                `json:"cache_hit" jsonschema:"an identical environment existed and was reused"`
	Builder        string              `json:"builder,omitempty"`
	BuilderVersion string              `json:"builder_version,omitempty"`
	Scan           string              `json:"scan,omitempty" jsonschema:"the security scan's verdict, or why there was none"`
	Warnings       []string            `json:"warnings,omitempty"`
	Error          *toolsets.ErrorInfo `json:"error,omitempty"`
}

// EnvironmentInfo is one environment in list_environments.
type EnvironmentInfo struct {
	Name           string           `json:"name"`
	Image          string           `json:"image"`
	Language       string           `json:"language"`
	Description    string           `json:"description,omitempty"`
	Template       string           `json:"template,omitempty"`
	Requested      []string         `json:"requested"`
	Packages       []PackageVersion `json:"packages"`
	Builder        string           `json:"builder"`
	BuilderVersion string           `json:"builder_version,omitempty"`
	BaseImage      string           `json:"base_image"`
	SizeBytes      int64            `json:"size_bytes"`
	Created        string           `json:"created"`
	LastUsed       string           `json:"last_used"`
}

// ListEnvironmentsOutput is list_environments' result.
type ListEnvironmentsOutput struct {
	Environments []EnvironmentInfo   `json:"environments"`
	Error        *toolsets.ErrorInfo `json:"error,omitempty"`
}

// ListEnvironmentsInput takes nothing.
type ListEnvironmentsInput struct{}

// DeleteEnvironmentInput names the environment to delete.
type DeleteEnvironmentInput struct {
	Name string `json:"name" jsonschema:"the environment's name (not the image reference)"`
}

// DeleteEnvironmentOutput says whether it was deleted.
type DeleteEnvironmentOutput struct {
	Deleted bool                `json:"deleted"`
	Name    string              `json:"name"`
	Error   *toolsets.ErrorInfo `json:"error,omitempty"`
}

// executeTools names the execute tools of the loaded languages, as a
// sentence does ("execute_python or execute_r"): the core names no
// language of its own.
func executeTools(langs []route.Language) string {
	names := make([]string, len(langs))
	for i, l := range langs {
		names[i] = "execute_" + l.ID
	}
	switch len(names) {
	case 0:
		return "an execute_<language> tool"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Toolset is the environment tools and resource, on the service b holds;
// langs are the languages of the execute tools.
func Toolset(env toolsets.Env, b *Builds, langs Languages) toolsets.Toolset {
	t := tools{env: env, b: b}
	return toolsets.Toolset{Name: "environments",
		Tools: []toolsets.Tool{Build(env, b, langs), List(env, b), Delete(env, b)},
		Resources: []toolsets.Resource{{Def: &mcp.Resource{
			URI: toolsets.EnvironmentsURI, Name: "environments", Title: "Custom environments",
			Description: "Your custom environments with their packages and labels, the templates a build can start from, and the builder in use",
			MIMEType:    "application/json",
		}, Handler: t.environmentsResource}}}
}

// Build is build_environment.
func Build(env toolsets.Env, b *Builds, langs Languages) toolsets.Tool {
	t := tools{env: env, b: b, q: &questions{}}
	c := env.Cfg.EnvironmentBuilder
	return toolsets.New(&mcp.Tool{
		Name: "build_environment", Title: "Build a custom environment",
		Description: fmt.Sprintf("Build an image mcp-forge/custom:<name> with extra packages on top of a sandbox image, then run code in it with "+
			"%s and custom_image. Packages are checked against the server's allowlist, blocklist and approval rules "+
			"(a package needing approval is asked of the user when the client supports it), at most %d per build, %d builds an hour per user, "+
			"%d s per build. Nothing is downloaded into a container and no package code runs while building. An identical request reuses "+
			"the existing image (cache_hit). Progress is reported while it resolves, downloads, layers and checks. Templates and existing "+
			"environments: %s.", executeTools(langs()), c.MaxPackagesPerBuild, c.BuildRateLimit.MaxBuildsPerHour, c.MaxBuildTime, toolsets.EnvironmentsURI),
	}, t.build)
}

// List is list_environments.
func List(env toolsets.Env, b *Builds) toolsets.Tool {
	t := tools{env: env, b: b}
	return toolsets.New(&mcp.Tool{
		Name: "list_environments", Title: "List custom environments",
		Description: "Your custom environments: image, language, requested and installed packages with versions, builder, base image, size, created and last used.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ ListEnvironmentsInput) (*mcp.CallToolResult, ListEnvironmentsOutput, error) {
		svc, err := t.b.service()
		var envs []environments.Environment
		if err == nil {
			envs, err = svc.List(ctx, t.env.Client(req.Session))
		}
		if err != nil {
			r, info := toolsets.Failure(err)
			return r, ListEnvironmentsOutput{Environments: []EnvironmentInfo{}, Error: info}, nil
		}
		out := ListEnvironmentsOutput{Environments: []EnvironmentInfo{}}
		var lines []string
		for _, e := range envs {
			out.Environments = append(out.Environments, envInfo(e))
			lines = append(lines, fmt.Sprintf("%s (%s, %d packages, %s)", e.Image, e.Language, len(e.Packages), config.FormatSize(e.SizeBytes)))
		}
		text := "No custom environments; build one with build_environment."
		if len(lines) > 0 {
			text = fmt.Sprintf("%d environment(s):\n%s", len(lines), strings.Join(lines, "\n"))
		}
		return toolcall.Text(text), out, nil
	})
}

// Delete is delete_environment.
func Delete(env toolsets.Env, b *Builds) toolsets.Tool {
	t := tools{env: env, b: b}
	return toolsets.New(&mcp.Tool{
		Name: "delete_environment", Title: "Delete a custom environment",
		Description: "Remove one of your custom environments (its image). Only environments this server built can be deleted.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in DeleteEnvironmentInput) (*mcp.CallToolResult, DeleteEnvironmentOutput, error) {
		svc, err := t.b.service()
		if err == nil {
			err = svc.Delete(ctx, t.env.Client(req.Session), in.Name)
		}
		if err != nil {
			r, info := toolsets.Failure(err)
			return r, DeleteEnvironmentOutput{Name: in.Name, Error: info}, nil
		}
		return toolcall.Text("Deleted " + environments.Ref(in.Name) + "."), DeleteEnvironmentOutput{Deleted: true, Name: in.Name}, nil
	})
}
func (t tools) build(ctx context.Context, req *mcp.CallToolRequest, in BuildEnvironmentInput) (*mcp.CallToolResult, BuildEnvironmentOutput, error) {
	svc, err := t.b.service()
	if err != nil {
		r, info := toolsets.Failure(err)
		return r, BuildEnvironmentOutput{Error: info}, nil
	}
	r := environments.Request{Name: in.Name, Language: in.Language, BaseImage: in.BaseImage, Template: in.Template,
		Packages: in.Packages, Description: in.Description, Client: t.env.Client(req.Session), CanAsk: canElicit(req), Progress: buildProgress(ctx, req)}
	// Only the answer to a question this server asked, in this call, of
	// this connection, counts; any other is ignored (and audited by the
	// service), so a client that was never asked cannot approve.
	conn, call := t.env.Conn(req.Session), callDigest("build_environment", in)
	answered, ignored := t.q.solicited(req, conn, call)
	if answered {
		r.UserApproved, r.UserDeclined = approval(req)
	}
	r.IgnoredAnswer = ignored
	res, err := svc.Build(ctx, r)
	var need *environments.ApprovalNeeded
	if errors.As(err, &need) {
		return askApproval(need, t.q.ask(conn, call)), BuildEnvironmentOutput{}, nil
	}
	out := BuildEnvironmentOutput{Builder: res.Builder, BuilderVersion: res.BuilderVersion, Warnings: res.Warnings}
	if err != nil {
		result, info := toolsets.Failure(err)
		out.Error = info
		return result, out, nil
	}
	out.Success, out.Image, out.SizeBytes, out.BuildTime, out.CacheHit, out.Scan = true, res.Image, res.SizeBytes, res.BuildSeconds, res.CacheHit, res.Scan
	for _, p := range res.Packages {
		out.Packages = append(out.Packages, PackageVersion{Name: p.Name, Version: p.Version})
	}
	var b strings.Builder
	if res.CacheHit {
		fmt.Fprintf(&b, "Reused %s (an identical environment exists).\n", res.Image)
	} else {
		fmt.Fprintf(&b, "Built %s in %.1f s with the %s builder (%s).\n", res.Image, res.BuildSeconds, res.Builder, config.FormatSize(res.SizeBytes))
	}
	var pv []string
	for _, p := range out.Packages {
		pv = append(pv, p.Name+" "+p.Version)
	}
	fmt.Fprintf(&b, "Packages: %s\nSecurity scan: %s\nRun code in it with custom_image=%q.\n", strings.Join(pv, ", "), res.Scan, res.Image)
	for _, w := range res.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	return toolcall.Text(b.String()), out, nil
}

// ApprovalID names the input request that asks the user to approve packages.
const ApprovalID = "approve_packages"

// canElicit reports whether the client said it can answer elicitation.
func canElicit(req *mcp.CallToolRequest) bool {
	if req == nil || req.Session == nil {
		return false
	}
	ip := req.Session.InitializeParams()
	return ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil
}

// askApproval is the input-required result (MCP multi round-trip, SEP-2322;
// the go-sdk turns it into an elicitation request for older clients) that
// asks the user to approve packages; the client repeats the call with the
// answer in InputResponses and token, the question's, as RequestState.
func askApproval(need *environments.ApprovalNeeded, token string) *mcp.CallToolResult {
	return &mcp.CallToolResult{RequestState: token, InputRequests: mcp.InputRequestMap{ApprovalID: &mcp.ElicitParams{
		Message: fmt.Sprintf("A custom environment build asks for packages that need approval:\n- %s\nApprove installing %s?",
			strings.Join(need.Why, "\n- "), strings.Join(need.Packages, ", ")),
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
			"approve": map[string]any{"type": "boolean", "title": "Approve", "description": "install " + strings.Join(need.Packages, ", ")}},
			"required": []string{"approve"}},
	}}}
}

// approval reads the user's answer from a repeated call: approved, declined.
func approval(req *mcp.CallToolRequest) (bool, bool) {
	if req == nil || req.Params == nil {
		return false, false
	}
	r, ok := req.Params.InputResponses[ApprovalID].(*mcp.ElicitResult)
	if !ok {
		return false, false
	}
	yes, _ := r.Content["approve"].(bool)
	if r.Action == "accept" && yes {
		return true, false
	}
	return false, true
}

// buildProgress turns a builder's progress into MCP progress notifications
// when the client asked for them.
func buildProgress(ctx context.Context, req *mcp.CallToolRequest) func(builder.Progress) {
	if req == nil || req.Session == nil || req.Params == nil {
		return nil
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	return func(p builder.Progress) {
		msg := p.Phase
		if p.Message != "" {
			msg += ": " + p.Message
		}
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
			Progress: float64(p.Step), Total: float64(p.Steps), Message: msg})
	}
}

func envInfo(e environments.Environment) EnvironmentInfo {
	out := EnvironmentInfo{Name: e.Name, Image: e.Image, Language: e.Language, Description: e.Description, Template: e.Template,
		Requested: e.Requested, Packages: []PackageVersion{}, Builder: e.Builder, BuilderVersion: e.BuilderVersion, BaseImage: e.BaseImage,
		SizeBytes: e.SizeBytes, Created: e.Created.UTC().Format(time.RFC3339), LastUsed: e.LastUsed.UTC().Format(time.RFC3339)}
	for _, p := range e.Packages {
		out.Packages = append(out.Packages, PackageVersion{Name: p.Name, Version: p.Version})
	}
	return out
}

func (t tools) environmentsResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	type envJSON struct {
		EnvironmentInfo
		Labels map[string]string `json:"labels"`
	}
	type tmpl struct {
		Name        string   `json:"name"`
		Description string   `json:"description"`
		Packages    []string `json:"packages"`
	}
	info := map[string]any{"builder": t.env.Cfg.EnvironmentBuilder.Builder, "enabled": t.b.Service != nil}
	templates := []tmpl{}
	for name, c := range t.env.Cfg.EnvironmentBuilder.Templates {
		templates = append(templates, tmpl{Name: name, Description: c.Description, Packages: c.Packages})
	}
	sort.Slice(templates, func(i, j int) bool { return templates[i].Name < templates[j].Name })
	info["templates"] = templates
	envs := []envJSON{}
	if t.b.Service == nil {
		info["unavailable"] = t.b.Reason
	} else {
		list, err := t.b.Service.List(ctx, t.env.Client(req.Session))
		if err != nil {
			return nil, err
		}
		for _, e := range list {
			envs = append(envs, envJSON{EnvironmentInfo: envInfo(e), Labels: e.Labels})
		}
	}
	info["environments"] = envs
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: toolsets.EnvironmentsURI, MIMEType: "application/json", Text: string(data)}}}, nil
}
