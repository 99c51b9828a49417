package relay

import "testing"

func TestStreamIDs(t *testing.T) {
	tests := []struct {
		a, b string
		less bool
	}{
		{"1-0", "1-1", true},
		{"1-9", "2-0", true},
		{"10-0", "9-99", false},
		{"5-5", "5-5", false},
		{"1700000000000-3", "1700000000000-12", true},
	}
	for _, tt := range tests {
		if got := lessID(tt.a, tt.b); got != tt.less {
			t.Errorf("lessID(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.less)
		}
	}
	for in, want := range map[string]string{"0-0": "0-1", "1700000000000-12": "1700000000000-13", "garbage": "0-0"} {
		if got := nextID(in); got != want {
			t.Errorf("nextID(%s) = %s, want %s", in, got, want)
		}
	}
}
