package main

import "testing"

func TestErrorLine(t *testing.T) {
	cases := []struct {
		tb   []string
		want int
	}{
		{[]string{"---", "Cell In [3], line 2\n      1 y = 1\n----> 2 z = y / 0", "ZeroDivisionError: division by zero"}, 2},
		{[]string{"Cell In[7], line 4\n----> 4 f()", "Cell In[7], line 2, in f()\n----> 2 return 1/0"}, 2},
		{[]string{"  File <string>, line 5"}, 5},
		{[]string{"KeyboardInterrupt"}, 0},
	}
	for _, c := range cases {
		if got := errorLine("", "", c.tb); got != c.want {
			t.Errorf("errorLine(%q) = %d, want %d", c.tb, got, c.want)
		}
	}
}
