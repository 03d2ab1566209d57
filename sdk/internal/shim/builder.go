package shim

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// BuilderPlugin is the go-plugin GRPCPlugin for builders. The plugin side
// sets Info and Factory; the core side leaves them empty.
type BuilderPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Info       Info
	Factory    builder.Factory
	MaxMessage int // 0: DefaultMaxMessage
	API        int // the plugin API version the core's client speaks (core side)
}

// GRPCServer registers the Plugin and Builder services (plugin side).
func (p *BuilderPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	srv := &builderServer{pluginServer: pluginServer[builder.Builder]{kind: "builder", info: p.Info, factory: p.Factory, broker: broker, maxMessage: MaxMessageOr(p.MaxMessage)}}
	pb.RegisterPluginServiceServer(s, srv)
	pb.RegisterBuilderServiceServer(s, srv)
	return nil
}

// GRPCClient returns a *BuilderClient (core side).
func (p *BuilderPlugin) GRPCClient(_ context.Context, broker *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	cc := forAPI(conn, p.API)
	return &BuilderClient{pluginClient: newPluginClient(broker, cc, MaxMessageOr(p.MaxMessage)), builder: pb.NewBuilderServiceClient(cc), api: p.API}, nil
}

type builderServer struct {
	pluginServer[builder.Builder]
	pb.UnimplementedBuilderServiceServer
}

func (s *builderServer) builder() (builder.Builder, error) { return s.get() }

func (s *builderServer) Plan(ctx context.Context, r *pb.PlanRequest) (*pb.PlanResponse, error) {
	b, err := s.builder()
	if err != nil {
		return nil, err
	}
	p, err := b.Plan(ctx, planRequestFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PlanResponse{CacheKey: p.CacheKey, Packages: packagesToPB(p.Packages), Steps: p.Steps, Warnings: p.Warnings}, nil
}

func (s *builderServer) Build(r *pb.BuildRequest, stream pb.BuilderService_BuildServer) error {
	b, err := s.builder()
	if err != nil {
		return err
	}
	var mu sync.Mutex // progress may come from several goroutines; a stream sends from one
	done := false
	res, err := b.Build(stream.Context(), builder.BuildRequest{Spec: planRequestFromPB(r.Spec), CacheKey: r.CacheKey, BuildID: r.BuildId,
		MaxBytes: r.MaxBytes, Prune: builder.Prune{MaxAge: time.Duration(r.PruneMaxAgeSeconds) * time.Second, MaxBytes: r.PruneMaxBytes}},
		func(p builder.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if done {
				return // a late report after Build returned has no stream to go to
			}
			_ = stream.Send(&pb.BuildResponse{Kind: &pb.BuildResponse_Progress{Progress: &pb.BuildProgress{
				Phase: p.Phase, Step: int32(p.Step), Steps: int32(p.Steps), Message: fitEvent(p.Message, s.maxMessage)}}})
		})
	mu.Lock()
	defer mu.Unlock()
	done = true
	if err != nil {
		return toStatus(err)
	}
	out := &pb.BuildOutcome{CacheKey: res.CacheKey, Dir: res.Dir, SizeBytes: res.SizeBytes, Warnings: res.Warnings}
	for _, l := range res.Lock {
		out.Lock = append(out.Lock, &pb.LockedPackage{Name: l.Name, Version: l.Version, Hashes: l.Hashes})
	}
	return stream.Send(&pb.BuildResponse{Kind: &pb.BuildResponse_Outcome{Outcome: out}})
}

func packagesToPB(ps []builder.Package) []*pb.BuildPackage {
	var out []*pb.BuildPackage
	for _, p := range ps {
		out = append(out, &pb.BuildPackage{Name: p.Name, Version: p.Version, Extras: p.Extras})
	}
	return out
}

func packagesFromPB(ps []*pb.BuildPackage) []builder.Package {
	var out []builder.Package
	for _, p := range ps {
		out = append(out, builder.Package{Name: p.Name, Version: p.Version, Extras: p.Extras})
	}
	return out
}

func planRequestToPB(r builder.PlanRequest) *pb.PlanRequest {
	return &pb.PlanRequest{Language: r.Language, BaseImage: r.BaseImage, Packages: packagesToPB(r.Packages),
		Index:       &pb.IndexSettings{Url: r.Index.URL, ExtraUrls: r.Index.ExtraURLs, Offline: r.Index.Offline},
		BaseImageId: r.BaseImageID, BaseLabels: r.BaseLabels}
}

func planRequestFromPB(r *pb.PlanRequest) builder.PlanRequest {
	if r == nil {
		return builder.PlanRequest{}
	}
	out := builder.PlanRequest{Language: r.Language, BaseImage: r.BaseImage, Packages: packagesFromPB(r.Packages),
		BaseImageID: r.BaseImageId, BaseLabels: r.BaseLabels}
	if ix := r.Index; ix != nil {
		out.Index = builder.Index{URL: ix.Url, ExtraURLs: ix.ExtraUrls, Offline: ix.Offline}
	}
	return out
}

// BuilderClient is the core's handle on a builder plugin.
type BuilderClient struct {
	pluginClient
	builder pb.BuilderServiceClient
	api     int             // the negotiated plugin API version
	v1      *V1BuilderPaths // set for a builder of API v1: what its requests carry besides v2's
}

// UseV1Paths makes the requests to a builder of API v1 carry p in the
// fields only v1 has (addV1Paths). The core calls it once, before any
// request; it has no effect on a builder of API v2.
func (c *BuilderClient) UseV1Paths(p V1BuilderPaths) {
	if c.api == 1 {
		c.v1 = &p
	}
}

// Plan implements builder.Builder.
func (c *BuilderClient) Plan(ctx context.Context, req builder.PlanRequest) (builder.Plan, error) {
	pr := planRequestToPB(req)
	c.v1.addToPlan(pr)
	r, err := c.builder.Plan(ctx, pr)
	if err != nil {
		return builder.Plan{}, fromStatus(err)
	}
	return builder.Plan{CacheKey: r.CacheKey, Packages: packagesFromPB(r.Packages), Steps: r.Steps, Warnings: r.Warnings}, nil
}

// Build implements builder.Builder.
func (c *BuilderClient) Build(ctx context.Context, req builder.BuildRequest, progress func(builder.Progress)) (builder.BuildResult, error) {
	br := &pb.BuildRequest{Spec: planRequestToPB(req.Spec), CacheKey: req.CacheKey, BuildId: req.BuildID,
		MaxBytes: req.MaxBytes, PruneMaxAgeSeconds: int64(req.Prune.MaxAge / time.Second), PruneMaxBytes: req.Prune.MaxBytes}
	c.v1.addToBuild(br)
	stream, err := c.builder.Build(ctx, br)
	if err != nil {
		return builder.BuildResult{}, fromStatus(err)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return builder.BuildResult{}, errors.New("build ended without a result")
		}
		if err != nil {
			if ctx.Err() != nil {
				return builder.BuildResult{}, ctx.Err()
			}
			return builder.BuildResult{}, fromStatus(err)
		}
		// Events already in flight when the core cancelled are not
		// delivered: a cancelled build is cancelled, whatever it sent.
		if ctx.Err() != nil {
			return builder.BuildResult{}, ctx.Err()
		}
		switch k := ev.Kind.(type) {
		case *pb.BuildResponse_Progress:
			if progress != nil {
				p := k.Progress
				progress(builder.Progress{Phase: p.Phase, Step: int(p.Step), Steps: int(p.Steps), Message: p.Message})
			}
		case *pb.BuildResponse_Outcome:
			o := k.Outcome
			out := builder.BuildResult{CacheKey: o.CacheKey, Dir: o.Dir, SizeBytes: o.SizeBytes, Warnings: o.Warnings}
			for _, l := range o.Lock {
				out.Lock = append(out.Lock, builder.Locked{Name: l.Name, Version: l.Version, Hashes: l.Hashes})
			}
			return out, nil
		}
	}
}

var (
	_ builder.Builder         = (*BuilderClient)(nil)
	_ pb.BuilderServiceServer = (*builderServer)(nil)
	_ pb.PluginServiceServer  = (*builderServer)(nil)
	_ plugin.GRPCPlugin       = (*BuilderPlugin)(nil)
)
