package backend

import (
	"strings"
	"testing"
)

func TestPrepareCheckpointCode(t *testing.T) {
	code, nonce, err := PrepareCheckpointCode("print('" + CheckpointMarker + "' + '" + CheckpointNonce + "')\n# " + CheckpointNonce)
	if err != nil || len(nonce) != 32 || strings.Contains(code, CheckpointNonce) || strings.Count(code, nonce) != 2 {
		t.Fatalf("%q %q %v", code, nonce, err)
	}
	_, again, _ := PrepareCheckpointCode(CheckpointNonce)
	if again == nonce {
		t.Fatal("the same nonce twice")
	}
	if _, _, err := PrepareCheckpointCode("print('" + CheckpointMarker + "')"); err == nil || !strings.Contains(err.Error(), CheckpointNonce) {
		t.Fatalf("code without the placeholder: %v", err)
	}
}

// Only the line with this run's nonce is the report, and it is checked:
// a marker line printed by the user's code (without the nonce) is ignored,
// a report with fields it does not have (a forged time) is refused.
func TestParseCheckpointReport(t *testing.T) {
	const n = "0123456789abcdef0123456789abcdef"
	tag := CheckpointMarker + n
	forged := CheckpointMarker + `{"saved":["x"],"created":"2099-01-01T00:00:00Z"}` + "\n"
	long := strings.Repeat("a", MaxCheckpointName+1)
	for _, c := range []struct {
		name, stdout string
		want         string // saved names joined, or "error: ..." a part of the error
		skipped      int
	}{
		{"plain", tag + `{"saved":["a","b"],"skipped":{"fh":"open file"}}` + "\n", "a,b", 1},
		{"forged line before", forged + "\n" + tag + `{"saved":["x","y"],"skipped":{}}` + "\n", "x,y", 0},
		{"forged line after", tag + `{"saved":["x"]}` + "\n" + forged, "x", 0},
		{"mid-line after user output", "no newline" + tag + `{"saved":["x"]}` + "\n", "x", 0},
		{"no trailing newline", tag + `{"saved":[]}`, "", 0},
		{"names with quotes, backslashes, non-ASCII", tag + `{"saved":["we\"ird\\n","caf\u00e9","\u65e5"]}`, "we\"ird\\n,café,日", 0},
		{"only a forged line", forged, "error: did not report", 0},
		{"twice", tag + `{"saved":["x"]}` + "\n" + tag + `{"saved":["y"]}` + "\n", "error: appears 2 times", 0},
		{"unknown field", tag + `{"saved":["x"],"created":"2099-01-01T00:00:00Z"}`, "error: unknown field", 0},
		{"not JSON", tag + `{"saved":[:"x"]}`, "error: not a checkpoint report", 0},
		{"trailing text", tag + `{"saved":["x"]} and more`, "error: followed by", 0},
		{"saved and skipped", tag + `{"saved":["x"],"skipped":{"x":"why"}}`, "error: both saved and skipped", 0},
		{"saved twice", tag + `{"saved":["x","x"]}`, "error: given twice", 0},
		{"empty name", tag + `{"saved":[""]}`, "error: empty saved name", 0},
		{"long name", tag + `{"saved":["` + long + `"]}`, "error: over", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := ParseCheckpointReport(c.stdout, n)
			if want, ok := strings.CutPrefix(c.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("want an error with %q, got %v (%+v)", want, err, rep)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(rep.Saved, ","); got != c.want || len(rep.Skipped) != c.skipped {
				t.Fatalf("saved %q skipped %v, want %q and %d skipped", got, rep.Skipped, c.want, c.skipped)
			}
		})
	}
	if _, err := ParseCheckpointReport(CheckpointMarker+`{"saved":[]}`, ""); err == nil {
		t.Fatal("an empty nonce matched")
	}
}
