package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Store keeps one JSON file per job in a directory only the server reads
// (it holds the jobs' output and results).
type Store struct{ dir string }

// NewStore returns the store in dir, creating it.
func NewStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("job records directory %s: %w", dir, err)
	}
	return &Store{dir: dir}, nil
}

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// Save writes rec whole or not at all (a crash mid-write leaves the old
// record).
func (s *Store) Save(rec Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".job-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), s.path(rec.ID))
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing the record of job %s: %w", rec.ID, werr)
	}
	return nil
}

// Remove deletes a job's record.
func (s *Store) Remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Read reads one job's record.
func (s *Store) Read(id string) (Record, error) {
	data, err := os.ReadFile(s.path(id))
	if err != nil {
		return Record{}, err
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return Record{}, fmt.Errorf("the record of job %s: %w", id, err)
	}
	return rec, nil
}

// Load reads every record. A file that is not a record (a partial write
// of an older version, a stray file) is skipped and left for the operator.
func (s *Store) Load() ([]Record, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("job records directory %s: %w", s.dir, err)
	}
	var out []Record
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".job-") {
			_ = os.Remove(filepath.Join(s.dir, name)) // a write that never finished
			continue
		}
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || CheckID(id) != nil || !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil {
			continue
		}
		var rec Record
		if json.Unmarshal(data, &rec) != nil || rec.ID != id {
			continue
		}
		out = append(out, rec)
	}
	return out, nil
}
