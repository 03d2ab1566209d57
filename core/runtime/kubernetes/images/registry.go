package images

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	layerstream "github.com/google/go-containerregistry/pkg/v1/stream"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Custom environments on a cluster live in runtime.kubernetes.image_registry:
// a node can only run what it can pull, and an image built on the core's
// host is on no node. The core layers an environment onto its base image
// in the registry itself (the base's layers are mounted, not uploaded
// again; no container runs, nothing is pulled to the core's host), pushes
// it by digest, and pods run it by that digest, which never changes.
//
// What a registry cannot do, the runtime says so rather than pretend:
//   - it cannot be searched by label: Images lists the tags of the
//     environments' repository (CustomRepo) and reads their configs;
//   - an image pushed without a tag cannot be listed at all: a build the
//     core crashed during leaves a manifest nobody names (its blobs are
//     reclaimed by the registry's garbage collection, run by its operator);
//   - a tag is removed by deleting its manifest, which removes every other
//     tag of the same manifest too (the Distribution API has no untag).

// CustomRepo is the repository of every environment in the registry:
// <image_registry>/mcp-forge/custom (core/environments.Repository).
const CustomRepo = "mcp-forge/custom"

// registryTimeout bounds one registry call that moves no layer.
const registryTimeout = 60 * time.Second

// errNoRegistry refuses a custom environment without a registry.
var errNoRegistry = errors.New("custom environments on the Kubernetes runtime need a registry the core pushes to and the nodes pull from: set runtime.kubernetes.image_registry (`make kube-up` runs one on 127.0.0.1:5000)")

// ErrNoBuilds refuses a custom environment on the Kubernetes runtime
// without runtime.kubernetes.image_registry.
var ErrNoBuilds = errNoRegistry

func (s *Store) remoteOpts(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithUserAgent("mcp-forge")}
}

// registryRef parses an image name as the registry holds it.
func (s *Store) registryRef(image string) (name.Reference, error) {
	ref, err := name.ParseReference(Ref(s.k.ImageRegistry, image))
	if err != nil {
		return nil, fmt.Errorf("image %s in runtime.kubernetes.image_registry %s: %w", image, s.k.ImageRegistry, err)
	}
	return ref, nil
}

// notFound reports whether a registry answered that a repository or a
// manifest is not there.
func notFound(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	if te.StatusCode == http.StatusNotFound {
		return true
	}
	for _, d := range te.Errors {
		switch d.Code {
		case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
			return true
		}
	}
	return false
}

// registryFail says which registry call failed, and what to check.
func (s *Store) registryFail(what string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) {
		return fmt.Errorf("%s in runtime.kubernetes.image_registry %s: %w (the core's registry credentials, in its docker config.json, must allow pull and push)", what, s.k.ImageRegistry, err)
	}
	return fmt.Errorf("%s in runtime.kubernetes.image_registry %s: %w", what, s.k.ImageRegistry, err)
}

// Registry describes image as the registry holds it; ok is false when
// the registry has no such repository or manifest.
func (s *Store) Registry(ctx context.Context, image string) (runtime.ImageInfo, bool, error) {
	ref, err := s.registryRef(image)
	if err != nil {
		return runtime.ImageInfo{}, false, err
	}
	cx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	desc, err := remote.Get(ref, s.remoteOpts(cx)...)
	if notFound(err) {
		return runtime.ImageInfo{}, false, nil
	}
	if err != nil {
		return runtime.ImageInfo{}, false, s.registryFail("look up "+ref.String(), err)
	}
	key := ref.Context().Digest(desc.Digest.String()).String()
	var info runtime.ImageInfo
	if v, ok := s.described.Load(key); ok {
		info = v.(runtime.ImageInfo)
	} else {
		if info, err = s.describe(ref.Context(), desc); err != nil {
			return runtime.ImageInfo{}, false, s.registryFail("read "+ref.String(), err)
		}
		s.described.Store(key, info)
	}
	if t, ok := ref.(name.Tag); ok {
		info.Names = []string{t.String(), s.coreName(t.String())}
	}
	return info, true, nil
}

// describe reads an image's config: its ID is its digest reference in
// repo, its size the sum of its blobs (compressed, as the registry stores
// them and a node fetches them; a registry does not know the unpacked size).
func (s *Store) describe(repo name.Repository, desc *remote.Descriptor) (runtime.ImageInfo, error) {
	if !desc.MediaType.IsImage() {
		return runtime.ImageInfo{}, fmt.Errorf("%s is a %s, not one image (a multi-platform index cannot be layered or checked)", desc.Digest, desc.MediaType)
	}
	img, err := desc.Image()
	if err != nil {
		return runtime.ImageInfo{}, err
	}
	m, err := img.Manifest()
	if err != nil {
		return runtime.ImageInfo{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return runtime.ImageInfo{}, err
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	id := repo.Digest(desc.Digest.String()).String()
	return runtime.ImageInfo{ID: id, Size: size, Labels: cf.Config.Labels, Digests: []string{desc.Digest.String(), id}, Created: cf.Created.Time}, nil
}

// BuildLayer implements runtime.ImageBuilder: the base image (its ID, a
// digest in the registry) with the directory b.Context appended as one
// layer, owned by root with the tree's own modes and times (what Podman's
// COPY layer/ / gives), labelled over the base's labels, pushed by digest
// only to <image_registry>/mcp-forge/custom. Its ID is that digest
// reference; Tag names it.
func (s *Store) BuildLayer(ctx context.Context, b runtime.LayerBuild) (string, error) {
	if s.k.ImageRegistry == "" {
		return "", errNoRegistry
	}
	if b.Base == "" || b.Context == "" {
		return "", errors.New("registry build: a base image ID and a context directory are required")
	}
	base, err := name.NewDigest(Ref(s.k.ImageRegistry, b.Base))
	if err != nil || !strings.HasPrefix(base.String(), s.k.ImageRegistry+"/") {
		return "", fmt.Errorf("base image %s is not an image of runtime.kubernetes.image_registry %s by digest: push the base image there (`make kube-up` pushes the sandbox images to its registry)", b.Base, s.k.ImageRegistry)
	}
	repo, err := name.NewRepository(Ref(s.k.ImageRegistry, CustomRepo))
	if err != nil {
		return "", fmt.Errorf("runtime.kubernetes.image_registry %s: %w", s.k.ImageRegistry, err)
	}
	opts := s.remoteOpts(ctx)
	bi, err := remote.Image(base, opts...)
	if err != nil {
		return "", s.registryFail("base image "+base.String(), err)
	}
	bm, err := bi.MediaType()
	if err != nil {
		return "", s.registryFail("base image "+base.String(), err)
	}
	layerType := types.DockerLayer
	if bm == types.OCIManifestSchema1 {
		layerType = types.OCILayer
	}

	// The layer streams from the tree: compressed and hashed as it is
	// uploaded, never held whole in memory or on disk.
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(runtime.TarDir(pw, b.Context)) }()
	defer pr.Close()
	layer := layerstream.NewLayer(pr, layerstream.WithCompressionLevel(gzip.BestSpeed), layerstream.WithMediaType(layerType))
	t0 := time.Now()
	if err := remote.WriteLayer(repo, layer, opts...); err != nil {
		return "", s.registryFail("upload the environment's layer to "+repo.String(), err)
	}
	if b.Log != nil {
		if d, err := layer.Digest(); err == nil {
			sz, _ := layer.Size()
			fmt.Fprintf(b.Log, "layer %s (%d bytes compressed) uploaded to %s in %s\n", d, sz, repo, time.Since(t0).Round(time.Millisecond))
		}
	}

	now := time.Now().UTC()
	img, err := mutate.Append(bi, mutate.Addendum{Layer: layer, MediaType: layerType,
		History: v1.History{Created: v1.Time{Time: now}, CreatedBy: "COPY layer/ / (mcp-forge environment)"}})
	if err != nil {
		return "", fmt.Errorf("registry build: append the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", fmt.Errorf("registry build: the base image's config: %w", err)
	}
	cf = cf.DeepCopy()
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	for k, v := range b.Labels {
		cf.Config.Labels[k] = v
	}
	cf.Created = v1.Time{Time: now}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", fmt.Errorf("registry build: set the labels: %w", err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("registry build: the manifest's digest: %w", err)
	}
	ref := repo.Digest(d.String())
	// By digest only: until Tag, no name points at a build that may still
	// be refused (size, scan).
	if err := remote.Write(ref, img, opts...); err != nil {
		return "", s.registryFail("push "+ref.String(), err)
	}
	if b.Log != nil {
		fmt.Fprintf(b.Log, "pushed %s in %s\n", ref, time.Since(t0).Round(time.Millisecond))
	}
	return ref.String(), nil
}

// Tag implements runtime.ImageBuilder: the manifest of id is put under the
// tag ref ("mcp-forge/custom:name") in the registry.
func (s *Store) Tag(ctx context.Context, id, ref string) error {
	if s.k.ImageRegistry == "" {
		return errNoRegistry
	}
	src, err := s.registryRef(id)
	if err != nil {
		return err
	}
	dst, err := name.NewTag(Ref(s.k.ImageRegistry, ref))
	if err != nil {
		return fmt.Errorf("tag %s: %w", ref, err)
	}
	cx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	opts := s.remoteOpts(cx)
	desc, err := remote.Get(src, opts...)
	if err != nil {
		return s.registryFail("tag "+dst.String()+": look up "+src.String(), err)
	}
	if src.Context().String() != dst.Context().String() {
		// Another repository: its blobs must be there first (mounted).
		img, err := desc.Image()
		if err == nil {
			err = remote.Write(dst, img, opts...)
		}
		return s.registryFail("tag "+dst.String(), err)
	}
	if err := remote.Tag(dst, desc, opts...); err != nil {
		return s.registryFail("tag "+dst.String(), err)
	}
	return nil
}

// Images implements runtime.ImageBuilder: the tagged images of the
// environments' repository carrying every one of labels (a registry has
// no label search, and untagged manifests cannot be listed).
func (s *Store) Images(ctx context.Context, labels map[string]string) ([]runtime.ImageInfo, error) {
	if s.k.ImageRegistry == "" {
		return nil, nil // no registry: no environment can exist
	}
	repo, err := name.NewRepository(Ref(s.k.ImageRegistry, CustomRepo))
	if err != nil {
		return nil, fmt.Errorf("runtime.kubernetes.image_registry %s: %w", s.k.ImageRegistry, err)
	}
	cx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	opts := s.remoteOpts(cx)
	tags, err := remote.List(repo, opts...)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.registryFail("list the tags of "+repo.String(), err)
	}
	sort.Strings(tags)
	byDigest := map[string]*runtime.ImageInfo{}
	var order []string
	for _, t := range tags {
		tag := repo.Tag(t)
		desc, err := remote.Get(tag, opts...)
		if notFound(err) {
			continue // removed since the list
		}
		if err != nil {
			return nil, s.registryFail("look up "+tag.String(), err)
		}
		key := desc.Digest.String()
		im := byDigest[key]
		if im == nil {
			info, err := s.describe(repo, desc)
			if err != nil {
				s.log.Warn("an image of the environments' repository cannot be read; left out", "image", tag.String(), "error", err)
				continue
			}
			im = &info
			byDigest[key] = im
			order = append(order, key)
		}
		im.Names = append(im.Names, tag.String(), s.coreName(tag.String()))
	}
	var out []runtime.ImageInfo
	for _, k := range order {
		im := byDigest[k]
		if runtime.HasLabels(im.Labels, labels) {
			out = append(out, *im)
		}
	}
	return out, nil
}

// RemoveImage implements runtime.ImageBuilder: the manifest ref names (by
// digest, or the one its tag points at) is deleted, and with it every tag
// of it. An image already gone is not an error.
func (s *Store) RemoveImage(ctx context.Context, ref string) error {
	if s.k.ImageRegistry == "" {
		return errNoRegistry
	}
	r, err := s.registryRef(ref)
	if err != nil {
		return err
	}
	cx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	opts := s.remoteOpts(cx)
	d, ok := r.(name.Digest)
	if !ok {
		desc, err := remote.Head(r, opts...)
		if notFound(err) {
			return nil
		}
		if err != nil {
			return s.registryFail("look up "+r.String(), err)
		}
		d = r.Context().Digest(desc.Digest.String())
	}
	// The tags of it go first: the distribution registry drops them with
	// the manifest, other registries keep a tag that names a deleted
	// manifest, and a listed environment must not outlive its removal.
	tags, err := s.tagsOf(d, opts)
	if err != nil {
		return err
	}
	for _, t := range tags {
		_ = remote.Delete(t, opts...) // refused where tags go with their manifest
	}
	s.described.Delete(d.String())
	if err := remote.Delete(d, opts...); err != nil && !notFound(err) {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusMethodNotAllowed {
			return fmt.Errorf("delete %s: the registry %s does not allow deletes (the distribution registry needs storage.delete.enabled: true): %w", d, s.k.ImageRegistry, err)
		}
		return s.registryFail("delete "+d.String(), err)
	}
	return nil
}

// tagsOf lists the tags of d's repository that name d.
func (s *Store) tagsOf(d name.Digest, opts []remote.Option) ([]name.Tag, error) {
	tags, err := remote.List(d.Context(), opts...)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.registryFail("list the tags of "+d.Context().String(), err)
	}
	var out []name.Tag
	for _, t := range tags {
		tag := d.Context().Tag(t)
		desc, err := remote.Head(tag, opts...)
		if err == nil && desc.Digest.String() == d.DigestStr() {
			out = append(out, tag)
		}
	}
	return out, nil
}
