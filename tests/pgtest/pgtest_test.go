package pgtest_test

import (
	"context"
	"testing"

	"github.com/es-changefeed/es-changefeed/tests/pgtest"
)

// TestServer_Restart: a server answers, and a SIGKILL and a start on the
// same directory keep what was committed.
func TestServer_Restart(t *testing.T) {
	s := pgtest.Start(t)
	ctx := context.Background()
	url := s.CreateDB(t, "app")
	p := s.Pool(t, "app")
	if url != s.URL("app") {
		t.Fatalf("CreateDB returned %s, want %s", url, s.URL("app"))
	}
	if _, err := p.Exec(ctx, "CREATE TABLE x (a int); INSERT INTO x VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	var n int
	var err error
	for range 3 { // the pool's connections died with the server
		if err = p.QueryRow(ctx, "SELECT count(*) FROM x").Scan(&n); err == nil {
			break
		}
	}
	if err != nil || n != 1 {
		t.Fatalf("after a restart: %d rows, %v; want the committed row", n, err)
	}
	s.Stop()
	if err := p.Ping(ctx); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.StartAgain()
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("started again: %v", err)
	}
}
