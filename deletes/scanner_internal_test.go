package deletes

import (
	"reflect"
	"testing"
)

func TestIntersect_KeepsOnlyWhatBothScansFound(t *testing.T) {
	tests := []struct {
		name string
		a, b []string
		want []string
	}{
		{"agree", []string{"a", "b"}, []string{"b", "a"}, []string{"a", "b"}},
		{"second found fewer", []string{"a", "b", "c"}, []string{"c"}, []string{"c"}},
		{"disjoint", []string{"a"}, []string{"b"}, nil},
		{"second empty", []string{"a"}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := intersect(tt.a, tt.b); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("intersect(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

func TestConfig_Validate(t *testing.T) {
	base := func() Config { return Config{ES: nil} }
	if err := base().Validate(); err == nil {
		t.Fatal("a config without ES was accepted")
	}
}
