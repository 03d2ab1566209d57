package environments

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// Rules of a refused layer.
const (
	RuleLayer     = "environment_layer"
	RuleImageSize = "max_image_size"
)

// WorkDir is the directory the plugin named plugin runs in, beneath
// stateDir (volumes.base_path): a builder's work directory, where its
// layers and caches live and its BuildResult.Dir is resolved. The plugin
// manager creates it (mode 0700) and starts the plugin there.
func WorkDir(stateDir, plugin string) string {
	return filepath.Join(stateDir, "builds", plugin)
}

// resolveLayer returns the absolute path of a builder's result dir beneath
// workDir. dir is the builder's word, so it is checked component by
// component without following a link: a link anywhere on the way could
// point the image build at any directory of the host.
func resolveLayer(workDir, dir string) (string, error) {
	if dir == "" || filepath.IsAbs(dir) || !filepath.IsLocal(dir) {
		return "", refused(RuleLayer, fmt.Sprintf(
			"the builder's result directory %q is not a relative path beneath its work directory; the builder plugin is faulty", dir))
	}
	cur := workDir
	for _, part := range strings.Split(filepath.Clean(dir), string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return "", refused(RuleLayer, fmt.Sprintf("the builder's result directory %q: %v", dir, err))
		}
		if !fi.IsDir() {
			return "", refused(RuleLayer, fmt.Sprintf(
				"the builder's result directory %q passes through %q, which is not a directory (a link is not followed)", dir, cur))
		}
	}
	return cur, nil
}

// checkLayer walks the layer: only directories, regular files and symbolic
// links (which resolve inside the image, not on the host), no set-id bits,
// at most max bytes of files. It returns the size of the files.
func checkLayer(root string, max int64) (int64, error) {
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		m := fi.Mode()
		switch {
		case m.IsDir(), m&fs.ModeSymlink != 0:
		case m.IsRegular():
			total += fi.Size()
		default:
			return refused(RuleLayer, fmt.Sprintf("the layer holds %q, a %s; only files, directories and links can go into an image", rel, m.Type()))
		}
		if m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			return refused(RuleLayer, fmt.Sprintf("the layer holds %q with a set-user or set-group id bit; refused", rel))
		}
		if total > max {
			return refused(RuleImageSize, fmt.Sprintf(
				"the packages take more than environment_builder.max_image_size (%d bytes) before layering; request fewer or smaller packages, or an operator raises the limit", max))
		}
		return nil
	})
	var r *refusal.Error
	if err != nil && !errors.As(err, &r) {
		err = refused(RuleLayer, fmt.Sprintf("reading the layer: %v", err))
	}
	return total, err
}
