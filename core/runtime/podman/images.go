package podman

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containers/buildah/define"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/domain/entities/types"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

var _ runtime.ImageBuilder = (*Client)(nil)

// BuildLayer builds FROM the base image's ID with a single COPY of the
// context onto /. Nothing runs in a container (no RUN), the network is
// disabled all the same, nothing is pulled, and the image is left untagged
// so that a build cancelled half-way never carries a name: the caller tags
// it once it passed its checks.
//
// The build context is a staging directory holding the Containerfile and
// the layer (hard-linked, so nothing is copied), and the Containerfile
// copies only layer/: the bindings send a Containerfile that lies outside
// the context under its absolute host path, which COPY . / then wrote into
// the image, host path and parent directories included (a base path under
// /tmp turned the image's /tmp into a 0755 directory of root's).
func (c *Client) BuildLayer(ctx context.Context, b runtime.LayerBuild) (string, error) {
	if b.Base == "" || b.Context == "" {
		return "", errors.New("podman build: a base image ID and a context directory are required")
	}
	cx, err := c.ctx(ctx)
	if err != nil {
		return "", err
	}
	// Beside the layer: the same filesystem, so the layer's files link.
	dir, err := os.MkdirTemp(filepath.Dir(b.Context), ".layer-build-")
	if err != nil {
		return "", fmt.Errorf("podman build: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := linkTree(b.Context, filepath.Join(dir, "layer")); err != nil {
		return "", fmt.Errorf("podman build: staging the layer: %w", err)
	}
	cf := filepath.Join(dir, "Containerfile")
	if err := os.WriteFile(cf, []byte("FROM "+b.Base+"\nCOPY layer/ /\n"), 0o600); err != nil {
		return "", fmt.Errorf("podman build: %w", err)
	}
	labels := make([]string, 0, len(b.Labels))
	for k, v := range b.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	out := b.Log
	if out == nil {
		out = io.Discard // never the bindings' default, os.Stdout: stdout belongs to MCP
	}
	opts := types.BuildOptions{BuildOptions: define.BuildOptions{
		ContextDirectory:        dir,
		Labels:                  labels,
		ConfigureNetwork:        define.NetworkDisabled,
		PullPolicy:              define.PullNever,
		OutputFormat:            define.OCIv1ImageManifest,
		RemoveIntermediateCtrs:  true,
		ForceRmIntermediateCtrs: true,
		Out:                     out,
		Err:                     out,
		ReportWriter:            out,
		CommonBuildOpts:         &define.CommonBuildOptions{},
	}}
	rep, err := images.Build(cx, []string{cf}, opts)
	if err != nil {
		return "", c.fail("", "podman build on "+b.Base, err)
	}
	if rep == nil || rep.ID == "" {
		return "", errors.New("podman build: the service reported no image ID")
	}
	return rep.ID, nil
}

// Tag names image id ref ("repo:tag").
func (c *Client) Tag(ctx context.Context, id, ref string) error {
	cx, cancel, err := c.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	repo, tag, ok := strings.Cut(ref, ":")
	if !ok || strings.Contains(tag, "/") {
		return fmt.Errorf("podman tag: %q is not repo:tag", ref)
	}
	return c.fail("", "podman tag "+ref, images.Tag(cx, id, tag, repo, nil))
}

// Images lists the local images carrying every label.
func (c *Client) Images(ctx context.Context, labels map[string]string) ([]runtime.ImageInfo, error) {
	cx, cancel, err := c.op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	var f []string
	for k, v := range labels {
		f = append(f, k+"="+v)
	}
	all := true
	list, err := images.List(cx, &images.ListOptions{All: &all, Filters: map[string][]string{"label": f}})
	if err != nil {
		return nil, c.fail("", "podman images", err)
	}
	out := make([]runtime.ImageInfo, 0, len(list))
	for _, im := range list {
		// A label filter of several labels is an AND on Podman 4.3 and 5;
		// checked again here so that an engine treating it as OR cannot
		// hand out another forge's images.
		if !runtime.HasLabels(im.Labels, labels) {
			continue
		}
		out = append(out, runtime.ImageInfo{ID: im.ID, Size: im.Size, Labels: im.Labels, Names: im.RepoTags,
			Created: time.Unix(im.Created, 0)})
	}
	return out, nil
}

// RemoveImage removes an image by name or ID; an image already gone is not
// an error.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	cx, cancel, err := c.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	_, errs := images.Remove(cx, []string{ref}, nil)
	var keep []error
	for _, e := range errs {
		if !strings.Contains(e.Error(), "image not known") && !strings.Contains(e.Error(), "no such image") {
			keep = append(keep, e)
		}
	}
	return c.fail("", "podman rmi "+ref, errors.Join(keep...))
}

// linkTree recreates the tree src at dst (which must not exist): the same
// directories with the same modes, its files hard-linked (copied where a
// link is refused) and its symbolic links recreated, never followed. Other
// file types are refused (the caller's layer check refuses them first).
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch m := fi.Mode(); {
		case m.IsDir():
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			// Whatever the umask: the image gets the tree's own modes.
			return os.Chmod(to, m&(fs.ModePerm|fs.ModeSticky))
		case m.IsRegular():
			if err := os.Link(p, to); err == nil {
				return nil
			}
			return copyFile(p, to, m.Perm())
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		default:
			return fmt.Errorf("%s is a %s; only files, directories and links can go into an image", rel, m.Type())
		}
	})
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(to, perm)
}
