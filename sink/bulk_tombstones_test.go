package sink_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/sink"
)

// TestBulk_Tombstones_NoResurrectionAfterGCDeletes: the target forgets a
// delete after index.gc_deletes (1s here): a write with an older external
// version then brings the document back, as the control document shows.
// Through the sink, a stale upsert that comes after that (a reclaimed
// pending entry of a consumer that was down) is skipped: the sink's own
// tombstone outlives the target's.
func TestBulk_Tombstones_NoResurrectionAfterGCDeletes(t *testing.T) {
	for _, flavor := range []esemu.Flavor{esemu.FlavorES8, esemu.FlavorES9, esemu.FlavorOpenSearch2} {
		t.Run(string(flavor), func(t *testing.T) {
			env := newBulkEnv(t, flavor, nil)
			emuDo(t, env.target, http.MethodPut, "/orders", `{"settings":{"number_of_shards":1,"number_of_replicas":0,"index.gc_deletes":"1s"}}`)
			env.handle(t, upsertEvent("uuid-1", "a", 5, `{"n":"old"}`))
			env.handle(t, deleteEvent("uuid-1", "a", 8))
			// The control: the same versions written directly.
			v5, v8 := mustVersion(t, 1, 5, false), mustVersion(t, 1, 8, true)
			emuDo(t, env.target, http.MethodPut, fmt.Sprintf("/orders/_doc/ctl?version=%d&version_type=external", v5), `{"n":"old"}`)
			emuDo(t, env.target, http.MethodDelete, fmt.Sprintf("/orders/_doc/ctl?version=%d&version_type=external", v8), "")
			time.Sleep(1500 * time.Millisecond)
			emuDo(t, env.target, http.MethodPut, fmt.Sprintf("/orders/_doc/ctl?version=%d&version_type=external", v5), `{"n":"old"}`)
			if !getDoc(t, env.target, "orders", "ctl", "").Found {
				t.Fatal("control: the target still refuses the older version after gc_deletes; the test proves nothing")
			}
			if err := env.h(context.Background(), upsertEvent("uuid-1", "a", 5, `{"n":"old"}`)); err != nil {
				t.Fatal(err)
			}
			if d := getDoc(t, env.target, "orders", "a", ""); d.Found {
				t.Fatalf("the stale upsert brought a back: %+v", d)
			}
			if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 2, Applied: 2, Conflicts: 1}); got != want {
				t.Errorf("Stats = %+v, want %+v (the stale upsert skipped without a request)", got, want)
			}
		})
	}
}
