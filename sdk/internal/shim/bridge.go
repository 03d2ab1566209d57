package shim

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// BridgePlugin is the go-plugin GRPCPlugin for bridges. The plugin side
// sets Info and Factory; the core side leaves them empty.
type BridgePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Info       Info
	Factory    bridge.Factory
	MaxMessage int // 0: DefaultMaxMessage
	API        int // the plugin API version the core's client speaks (core side)
}

// GRPCServer registers the Plugin and Bridge services (plugin side).
func (p *BridgePlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	srv := &bridgeServer{pluginServer: pluginServer[bridge.Bridge]{kind: "bridge", info: p.Info, factory: p.Factory, broker: broker, maxMessage: MaxMessageOr(p.MaxMessage)}}
	pb.RegisterPluginServiceServer(s, srv)
	pb.RegisterBridgeServiceServer(s, srv)
	return nil
}

// GRPCClient returns a *BridgeClient (core side).
func (p *BridgePlugin) GRPCClient(_ context.Context, broker *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	cc := forAPI(conn, p.API)
	return &BridgeClient{pluginClient: newPluginClient(broker, cc, MaxMessageOr(p.MaxMessage)), bridge: pb.NewBridgeServiceClient(cc)}, nil
}

type bridgeServer struct {
	pluginServer[bridge.Bridge]
	pb.UnimplementedBridgeServiceServer
}

func (s *bridgeServer) bridge() (bridge.Bridge, error) { return s.get() }

func (s *bridgeServer) ListTools(ctx context.Context, _ *pb.ListToolsRequest) (*pb.ListToolsResponse, error) {
	b, err := s.bridge()
	if err != nil {
		return nil, err
	}
	tools, err := b.ListTools(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListToolsResponse{}
	for _, t := range tools {
		out.Tools = append(out.Tools, &pb.Tool{Server: t.Server, Name: t.Name, Description: t.Description,
			InputSchemaJson: string(t.InputSchema), OutputSchemaJson: string(t.OutputSchema), OriginalName: t.OriginalName})
	}
	return out, nil
}

func (s *bridgeServer) CallTool(ctx context.Context, r *pb.CallToolRequest) (*pb.CallToolResponse, error) {
	b, err := s.bridge()
	if err != nil {
		return nil, err
	}
	var args json.RawMessage
	if r.ArgumentsJson != "" {
		args = json.RawMessage(r.ArgumentsJson)
	}
	res, err := b.CallTool(ctx, bridge.CallRequest{Server: r.Server, Tool: r.Tool, Arguments: args, Timeout: time.Duration(r.TimeoutMs) * time.Millisecond})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.CallToolResponse{StructuredJson: string(res.Structured), Text: res.Text, IsError: res.IsError, ErrorMessage: res.Message}
	for _, im := range res.Images {
		out.Images = append(out.Images, &pb.Image{Name: im.Name, MimeType: im.MIMEType, Data: im.Data})
	}
	return out, nil
}

func (s *bridgeServer) Generate(ctx context.Context, r *pb.GenerateRequest) (*pb.GenerateResponse, error) {
	b, err := s.bridge()
	if err != nil {
		return nil, err
	}
	files, err := b.Generate(ctx, bridge.GenerateRequest{Language: r.Language, Tools: r.Tools})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GenerateResponse{Files: files}, nil
}

// BridgeClient is the core's handle on a bridge plugin.
type BridgeClient struct {
	pluginClient
	bridge pb.BridgeServiceClient
}

// ListTools implements bridge.Bridge.
func (c *BridgeClient) ListTools(ctx context.Context) ([]bridge.Tool, error) {
	r, err := c.bridge.ListTools(ctx, &pb.ListToolsRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	var out []bridge.Tool
	for _, t := range r.Tools {
		bt := bridge.Tool{Server: t.Server, Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(t.InputSchemaJson), OriginalName: t.OriginalName}
		if t.OutputSchemaJson != "" {
			bt.OutputSchema = json.RawMessage(t.OutputSchemaJson)
		}
		out = append(out, bt)
	}
	return out, nil
}

// CallTool implements bridge.Bridge. Images pass the same check as a
// backend's before they reach a client.
func (c *BridgeClient) CallTool(ctx context.Context, req bridge.CallRequest) (bridge.CallResult, error) {
	r, err := c.bridge.CallTool(ctx, &pb.CallToolRequest{Server: req.Server, Tool: req.Tool, ArgumentsJson: string(req.Arguments), TimeoutMs: req.Timeout.Milliseconds()})
	if err != nil {
		return bridge.CallResult{}, fromStatus(err)
	}
	out := bridge.CallResult{Text: r.Text, IsError: r.IsError, Message: r.ErrorMessage}
	if r.StructuredJson != "" {
		out.Structured = json.RawMessage(r.StructuredJson)
	}
	checked := backend.ExecuteResult{}
	for _, im := range r.Images {
		checked.Images = append(checked.Images, backend.Image{Name: im.Name, MIMEType: im.MimeType, Data: im.Data})
	}
	checkImages(&checked)
	out.Images = checked.Images
	if len(checked.Notices) > 0 && out.Text != "" {
		out.Text += "\n"
	}
	for i, n := range checked.Notices {
		if i > 0 {
			out.Text += "\n"
		}
		out.Text += n
	}
	return out, nil
}

// Generate implements bridge.Bridge.
func (c *BridgeClient) Generate(ctx context.Context, req bridge.GenerateRequest) (map[string][]byte, error) {
	r, err := c.bridge.Generate(ctx, &pb.GenerateRequest{Language: req.Language, Tools: req.Tools})
	if err != nil {
		return nil, fromStatus(err)
	}
	return r.Files, nil
}

var (
	_ bridge.Bridge          = (*BridgeClient)(nil)
	_ pb.BridgeServiceServer = (*bridgeServer)(nil)
	_ pb.PluginServiceServer = (*bridgeServer)(nil)
	_ plugin.GRPCPlugin      = (*BridgePlugin)(nil)
)
