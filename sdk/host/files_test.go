package host

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadDirCapsAndNeverFollows(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.png"), []byte("small"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.png"), make([]byte, 100), 0o644)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	os.Symlink(secret, filepath.Join(dir, "c.png"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	files, err := ReadDir(dir, 50, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Name != "a.png" || string(files[0].Data) != "small" || !files[1].Skipped || files[1].Size != 100 {
		t.Fatalf("%+v", files)
	}
	if files, _ := ReadDir(filepath.Join(dir, "missing"), 50, 1000); files != nil {
		t.Fatal("missing directory should read as empty")
	}
}
