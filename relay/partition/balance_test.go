package partition

import (
	"reflect"
	"testing"
)

func TestBalance(t *testing.T) {
	tests := []struct {
		name                       string
		partitions, members, self  int
		held                       []int
		wantLimit                  int
		wantRelease, wantTryPrefix []int
		wantTryLen                 int
	}{
		{name: "alone takes everything", partitions: 6, members: 1, self: 0, wantLimit: 6, wantTryPrefix: []int{0, 1, 2, 3, 4, 5}, wantTryLen: 6},
		{name: "second of three starts at its share", partitions: 6, members: 3, self: 1, wantLimit: 2, wantTryPrefix: []int{2, 3, 4, 5, 0, 1}, wantTryLen: 6},
		{name: "third of three wraps", partitions: 6, members: 3, self: 2, held: []int{4}, wantLimit: 2, wantTryPrefix: []int{5, 0, 1, 2, 3}, wantTryLen: 5},
		{name: "at the limit does nothing", partitions: 6, members: 3, self: 0, held: []int{0, 1}, wantLimit: 2},
		{name: "a relay joined: give back the highest extras", partitions: 6, members: 2, self: 0, held: []int{5, 0, 3, 1, 2, 4}, wantLimit: 3, wantRelease: []int{5, 4, 3}},
		{name: "third joined", partitions: 6, members: 3, self: 0, held: []int{0, 1, 2}, wantLimit: 2, wantRelease: []int{2}},
		{name: "a relay died: limit rises", partitions: 6, members: 2, self: 1, held: []int{2, 3}, wantLimit: 3, wantTryPrefix: []int{4, 5, 0, 1}, wantTryLen: 4},
		{name: "uneven: ceil", partitions: 8, members: 3, self: 0, held: []int{0, 1, 2}, wantLimit: 3},
		{name: "more relays than partitions", partitions: 2, members: 5, self: 4, wantLimit: 1, wantTryPrefix: []int{0, 1}, wantTryLen: 2},
		{name: "no members read yet counts as one", partitions: 4, members: 0, self: 0, held: nil, wantLimit: 4, wantTryLen: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Balance(tt.partitions, tt.members, tt.self, tt.held)
			if got.Limit != tt.wantLimit {
				t.Errorf("limit %d, want %d", got.Limit, tt.wantLimit)
			}
			if !reflect.DeepEqual(got.Release, tt.wantRelease) {
				t.Errorf("release %v, want %v", got.Release, tt.wantRelease)
			}
			if len(got.Try) != tt.wantTryLen {
				t.Errorf("try %v: %d partitions, want %d", got.Try, len(got.Try), tt.wantTryLen)
			}
			if len(tt.wantTryPrefix) > 0 && !reflect.DeepEqual(got.Try[:len(tt.wantTryPrefix)], tt.wantTryPrefix) {
				t.Errorf("try %v, want it to start with %v", got.Try, tt.wantTryPrefix)
			}
			for _, h := range tt.held {
				for _, q := range got.Try {
					if q == h {
						t.Errorf("tries %d, which it holds", q)
					}
				}
			}
		})
	}
}

// TestBalance_Converges simulates relays taking turns on a shared lease
// table: whatever the order, every partition ends held, nobody above
// ceil(P/N).
func TestBalance_Converges(t *testing.T) {
	for _, tc := range []struct{ p, n int }{{6, 3}, {8, 3}, {6, 4}, {1, 3}, {16, 5}} {
		owner := make([]int, tc.p) // partition -> relay+1, 0 free
		for step := 0; step < 10*tc.n; step++ {
			r := step % tc.n
			var held []int
			for q, o := range owner {
				if o == r+1 {
					held = append(held, q)
				}
			}
			plan := Balance(tc.p, tc.n, r, held)
			for _, q := range plan.Release {
				owner[q] = 0
			}
			n := len(held) - len(plan.Release)
			for _, q := range plan.Try {
				if n >= plan.Limit {
					break
				}
				if owner[q] == 0 {
					owner[q] = r + 1
					n++
				}
			}
		}
		limit := (tc.p + tc.n - 1) / tc.n
		count := map[int]int{}
		for q, o := range owner {
			if o == 0 {
				t.Errorf("P=%d N=%d: partition %d is held by nobody (%v)", tc.p, tc.n, q, owner)
			}
			count[o]++
		}
		for o, c := range count {
			if c > limit {
				t.Errorf("P=%d N=%d: relay %d holds %d > %d", tc.p, tc.n, o-1, c, limit)
			}
		}
	}
}
