package grant

import "testing"

// A token resolves for the plugin it was issued to only, until removed;
// tokens are fresh each time.
func TestTokens(t *testing.T) {
	var tk Tokens[string]
	a, b := NewToken(), NewToken()
	if a == b || len(a) != 32 {
		t.Fatalf("tokens %q %q", a, b)
	}
	tk.Put(a, "python", "grant-a")
	tk.Put(b, "r", "grant-b")
	for _, tc := range []struct {
		plugin, token, want string
		ok                  bool
	}{
		{"python", a, "grant-a", true},
		{"r", a, "", false},
		{"r", b, "grant-b", true},
		{"python", "nope", "", false},
	} {
		if got, ok := tk.Lookup(tc.plugin, tc.token); got != tc.want || ok != tc.ok {
			t.Errorf("Lookup(%s, %s) = %q %v, want %q %v", tc.plugin, tc.token, got, ok, tc.want, tc.ok)
		}
	}
	if tk.Len() != 2 || len(tk.All()) != 2 {
		t.Errorf("len %d, all %v", tk.Len(), tk.All())
	}
	if !tk.Remove(a) || tk.Remove(a) {
		t.Error("Remove reports a live token once")
	}
	if _, ok := tk.Lookup("python", a); ok {
		t.Error("a removed token resolves")
	}
	if got := Cut(a + a + a); len(got) > 40 {
		t.Errorf("Cut: %q", got)
	}
}
