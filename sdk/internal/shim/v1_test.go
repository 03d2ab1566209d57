package shim

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// v1Dropped are the v1 fields v2 reserves; the v1 path adds what a v1
// plugin needs of them (registerHostV1; V1BuilderPaths for builders).
var v1Dropped = map[protoreflect.FullName]bool{
	"forge.plugin.v1.CreateResponse.workspace":  true,
	"forge.plugin.v1.BuildRequest.workspace_id": true,
	"forge.plugin.v1.BuildRequest.work_dir":     true,
	"forge.plugin.v1.BuildRequest.cache_dir":    true,
	"forge.plugin.v1.IndexSettings.find_links":  true,
}

// Every RPC of API v1 (the committed descriptor set buf breaking guards)
// has a v2 RPC of the same name in the mapped service, whose request and
// response carry every v1 field under the same number, kind and
// cardinality, message fields recursively: the rule that lets the core
// speak v1 by renaming services only.
func TestV1WireCompatible(t *testing.T) {
	v1 := v1Files(t)
	methods := 0
	for v2name, v1name := range v2ToV1 {
		d1, err := v1.FindDescriptorByName(protoreflect.FullName(v1name))
		if err != nil {
			t.Fatalf("v1 service %s: %v", v1name, err)
		}
		d2, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(v2name))
		if err != nil {
			t.Fatalf("v2 service %s: %v", v2name, err)
		}
		s1, s2 := d1.(protoreflect.ServiceDescriptor), d2.(protoreflect.ServiceDescriptor)
		for i := 0; i < s1.Methods().Len(); i++ {
			m1 := s1.Methods().Get(i)
			m2 := s2.Methods().ByName(m1.Name())
			if m2 == nil {
				t.Errorf("%s has no method %s of v1's %s", v2name, m1.Name(), v1name)
				continue
			}
			methods++
			if m1.IsStreamingClient() != m2.IsStreamingClient() || m1.IsStreamingServer() != m2.IsStreamingServer() {
				t.Errorf("%s.%s streams differently in v2", v1name, m1.Name())
			}
			sameWire(t, m1.Input(), m2.Input(), map[protoreflect.FullName]bool{})
			sameWire(t, m1.Output(), m2.Output(), map[protoreflect.FullName]bool{})
		}
	}
	if methods < 25 {
		t.Fatalf("checked only %d methods", methods)
	}
}

func sameWire(t *testing.T, a, b protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) {
	t.Helper()
	if seen[a.FullName()] {
		return
	}
	seen[a.FullName()] = true
	for i := 0; i < a.Fields().Len(); i++ {
		fa := a.Fields().Get(i)
		fb := b.Fields().ByNumber(fa.Number())
		if fb == nil {
			if !v1Dropped[fa.FullName()] || !b.ReservedRanges().Has(fa.Number()) {
				t.Errorf("v1 field %s (%d) is missing from v2's %s, and not a reserved, documented drop", fa.FullName(), fa.Number(), b.FullName())
			}
			continue
		}
		if fa.Kind() != fb.Kind() || fa.Cardinality() != fb.Cardinality() || fa.IsMap() != fb.IsMap() {
			t.Errorf("v1 field %s is %s %s, v2's %s is %s %s", fa.FullName(), fa.Cardinality(), fa.Kind(), fb.FullName(), fb.Cardinality(), fb.Kind())
			continue
		}
		if fa.Message() != nil {
			sameWire(t, fa.Message(), fb.Message(), seen)
		}
		if fa.Enum() != nil {
			for j := 0; j < fa.Enum().Values().Len(); j++ {
				if v := fa.Enum().Values().Get(j); fb.Enum().Values().ByNumber(v.Number()) == nil {
					t.Errorf("v1 enum value %s has no v2 counterpart", v.FullName())
				}
			}
		}
	}
}

// v1Files are API v1's descriptors as committed (proto/api-v1.json).
func v1Files(t *testing.T) *protoregistry.Files {
	t.Helper()
	raw, err := os.ReadFile("../../proto/api-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	// buf adds an extension of its own (bufExtension) to each file.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// asV1 is msg's bytes read as the v1 message name, in protojson.
func asV1(t *testing.T, files *protoregistry.Files, msg proto.Message, name protoreflect.FullName) string {
	t.Helper()
	d, err := files.FindDescriptorByName(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	return protojson.Format(m)
}

// A builder of API v1 reads its host paths where v1 put them: a v1 builder
// decodes the requests the core sends it with them in v1's fields; a v2
// builder's requests carry none.
func TestV1BuilderPaths(t *testing.T) {
	files := v1Files(t)
	paths := V1BuilderPaths{WorkDir: "/state/builds/uv", CacheDir: "/cache/uv", FindLinks: []string{"/srv/a", "/srv/b"}}
	for _, c := range []struct {
		api  int
		want []string
		not  []string
	}{
		{1, []string{`"workDir":"/state/builds/uv"`, `"cacheDir":"/cache/uv"`, `"findLinks":["/srv/a","/srv/b"]`}, nil},
		{2, nil, []string{"workDir", "cacheDir", "findLinks", "/srv/a"}},
	} {
		c0 := &BuilderClient{api: c.api}
		c0.UseV1Paths(paths)
		plan := &pb.PlanRequest{Language: "python", BaseImage: "img"} // no index: one is made for find_links
		c0.v1.addToPlan(plan)
		build := &pb.BuildRequest{Spec: &pb.PlanRequest{Language: "python", Index: &pb.IndexSettings{Url: "https://x/simple"}}, CacheKey: "k"}
		c0.v1.addToBuild(build)
		got := strings.Join(strings.Fields(asV1(t, files, plan, "forge.plugin.v1.PlanRequest")+asV1(t, files, build, "forge.plugin.v1.BuildRequest")), "")
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("API %d: the v1 reading lacks %s: %s", c.api, w, got)
			}
		}
		for _, w := range c.not {
			if strings.Contains(got, w) {
				t.Errorf("API %d: the request carries %s: %s", c.api, w, got)
			}
		}
		if c.api == 1 && strings.Count(got, "/srv/a") != 2 {
			t.Errorf("find_links belong in both the plan's and the build's spec: %s", got)
		}
	}
}
