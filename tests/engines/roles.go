package engines

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
)

// Grant is one privilege of a role: a cluster privilege (Indices "") or
// one on the indices the pattern Indices names.
type Grant struct {
	Indices   string
	Privilege string
	// Action is what a refusal names when the grant is missing:
	// OpenSearch's 403 names the action ("no permissions for
	// [indices:data/read/search]"), not the action group; Elasticsearch's
	// names the privileges that would grant it ("granted by the index
	// privileges [read,all]"), so there it is Privilege.
	Action string
	// Only says when the program uses the grant if not on every run (the
	// least-privilege test then records that its run did not need it).
	Only string
}

// Role is one of docs/SECURITY.md's roles in one product's terms.
type Role struct {
	Name   string // escf_relay
	Users  []string
	Grants []Grant
}

// roleTable holds docs/SECURITY.md's roles, per product: the secured
// clusters are started with them, the relay's API key is made from
// escf_relay, and tests/e2e's TestSecurity_LeastPrivileges removes each
// grant in turn. Tests name their own indices: "*" stands for the
// followed indices, "copy-*" for the bulk sink's targets.
var roleTable = map[string][]Role{
	"elasticsearch": {
		{Name: "escf_relay", Users: []string{UserRelay}, Grants: []Grant{
			{Privilege: "monitor"},
			{Indices: "*", Privilege: "read"},
			{Indices: "*", Privilege: "monitor"},
			{Indices: "*", Privilege: "view_index_metadata"},
			{Indices: "*", Privilege: "maintenance"},
		}},
		// Unlike the relay, the copy reads no layout: no
		// view_index_metadata (read grants indices:admin/resolve/index).
		{Name: "escf_bootstrap", Users: []string{UserBootstrap}, Grants: []Grant{
			{Privilege: "monitor"},
			{Indices: "*", Privilege: "read"},
			{Indices: "*", Privilege: "monitor"},
			{Indices: "*", Privilege: "maintenance"},
		}},
		{Name: "escf_bulk", Users: []string{UserBulk}, Grants: []Grant{
			{Privilege: "monitor"},
			{Indices: "copy-*", Privilege: "write"},
			{Indices: "copy-*", Privilege: "create_index"},
			{Indices: "copy-*", Privilege: "view_index_metadata"},
			{Indices: "escf-applied", Privilege: "read"},
			{Indices: "escf-applied", Privilege: "write"},
			{Indices: "escf-applied", Privilege: "create_index"},
		}},
		{Name: "escf_status", Users: []string{UserStatus}, Grants: []Grant{
			{Privilege: "monitor"},
			{Indices: "*", Privilege: "monitor"},
		}},
	},
	"opensearch": {
		{Name: "escf_relay", Users: []string{UserRelay}, Grants: []Grant{
			{Privilege: "cluster_monitor", Action: "cluster:monitor/"},
			{Privilege: "indices:data/read/scroll", Action: "indices:data/read/scroll", Only: "scroll listings (--delete-listing scroll, OpenSearch before 2.4, feeds from before delivered ranges)"},
			{Privilege: "indices:data/read/scroll/clear", Action: "indices:data/read/scroll/clear", Only: "scroll listings (--delete-listing scroll, OpenSearch before 2.4, feeds from before delivered ranges)"},
			// OpenSearch's read group holds indices:admin/resolve/index,
			// the first call refused without it.
			{Indices: "*", Privilege: "read", Action: "indices:admin/resolve/index"},
			{Indices: "*", Privilege: "indices_monitor", Action: "indices:monitor/"},
			{Indices: "*", Privilege: "indices:admin/refresh*", Action: "indices:admin/refresh"},
			{Indices: "*", Privilege: "indices:admin/mappings/get", Action: "indices:admin/mappings/get"},
		}},
		{Name: "escf_bootstrap", Users: []string{UserBootstrap}, Grants: []Grant{
			{Privilege: "cluster_monitor", Action: "cluster:monitor/"},
			{Privilege: "indices:data/read/scroll", Action: "indices:data/read/scroll", Only: "scroll listings (--bootstrap-listing scroll, OpenSearch before 2.4)"},
			{Privilege: "indices:data/read/scroll/clear", Action: "indices:data/read/scroll/clear", Only: "scroll listings (--bootstrap-listing scroll, OpenSearch before 2.4)"},
			{Indices: "*", Privilege: "read", Action: "indices:admin/resolve/index"},
			{Indices: "*", Privilege: "indices_monitor", Action: "indices:monitor/"},
			{Indices: "*", Privilege: "indices:admin/refresh*", Action: "indices:admin/refresh"},
		}},
		{Name: "escf_bulk", Users: []string{UserBulk}, Grants: []Grant{
			{Privilege: "cluster_monitor", Action: "cluster:monitor/"},
			{Privilege: "indices:data/write/bulk", Action: "indices:data/write/bulk"},
			{Indices: "copy-*", Privilege: "write", Action: "indices:data/write/"},
			{Indices: "copy-*", Privilege: "create_index", Action: "indices:admin/create"},
			{Indices: "copy-*", Privilege: "indices:admin/mappings/get", Action: "indices:admin/mappings/get"},
			{Indices: "escf-applied", Privilege: "read", Action: "indices:data/read/"},
			{Indices: "escf-applied", Privilege: "write", Action: "indices:data/write/"},
			{Indices: "escf-applied", Privilege: "create_index", Action: "indices:admin/create"},
		}},
		{Name: "escf_status", Users: []string{UserStatus}, Grants: []Grant{
			{Privilege: "cluster_monitor", Action: "cluster:monitor/"},
			{Indices: "*", Privilege: "indices_monitor", Action: "indices:monitor/"},
		}},
	},
}

// Roles returns docs/SECURITY.md's roles in product's terms
// ("elasticsearch", "opensearch").
func Roles(product string) []Role {
	return append([]Role(nil), roleTable[product]...)
}

// RoleNamed returns product's role called name (escf_relay, escf_bulk,
// escf_bootstrap, escf_status); it panics on another name, a test's bug.
func RoleNamed(product, name string) Role {
	for _, r := range roleTable[product] {
		if r.Name == name {
			return r
		}
	}
	panic("engines: no role " + name + " for " + product)
}

// Without returns r with its i-th grant removed.
func (r Role) Without(i int) Role {
	out := r
	out.Grants = append(append([]Grant(nil), r.Grants[:i]...), r.Grants[i+1:]...)
	return out
}

// String names the grant as the docs do: "cluster monitor",
// "read on *".
func (g Grant) String() string {
	if g.Indices == "" {
		return "cluster " + g.Privilege
	}
	return g.Privilege + " on " + g.Indices
}

// Body is the role in product's REST shape (PUT /_security/role/<name>,
// PUT /_plugins/_security/api/roles/<name>); YAML takes it as it is, so
// roles.yml is made of it too.
func (r Role) Body(product string) []byte {
	var cluster []string
	var patterns []string
	byPattern := map[string][]string{}
	for _, g := range r.Grants {
		if g.Indices == "" {
			cluster = append(cluster, g.Privilege)
			continue
		}
		if _, ok := byPattern[g.Indices]; !ok {
			patterns = append(patterns, g.Indices)
		}
		byPattern[g.Indices] = append(byPattern[g.Indices], g.Privilege)
	}
	if cluster == nil {
		cluster = []string{}
	}
	var b []byte
	if product == "opensearch" {
		type perm struct {
			Patterns []string `json:"index_patterns"`
			Actions  []string `json:"allowed_actions"`
		}
		body := struct {
			Cluster []string `json:"cluster_permissions"`
			Indices []perm   `json:"index_permissions"`
		}{Cluster: cluster, Indices: []perm{}}
		for _, p := range patterns {
			body.Indices = append(body.Indices, perm{Patterns: []string{p}, Actions: byPattern[p]})
		}
		b, _ = json.Marshal(body)
		return b
	}
	type perm struct {
		Names      []string `json:"names"`
		Privileges []string `json:"privileges"`
		Restricted bool     `json:"allow_restricted_indices"`
	}
	body := struct {
		Cluster []string `json:"cluster"`
		Indices []perm   `json:"indices"`
	}{Cluster: cluster, Indices: []perm{}}
	for _, p := range patterns {
		body.Indices = append(body.Indices, perm{Names: []string{p}, Privileges: byPattern[p]})
	}
	b, _ = json.Marshal(body)
	return b
}

// rolesYAML is roles.yml of product's security configuration: every role
// of the table (OpenSearch's file starts with its _meta line).
func rolesYAML(product string) []byte {
	var b strings.Builder
	if product == "opensearch" {
		b.WriteString("_meta: {type: \"roles\", config_version: 2}\n")
	}
	for _, r := range roleTable[product] {
		fmt.Fprintf(&b, "%s: %s\n", r.Name, r.Body(product))
	}
	return []byte(b.String())
}

// roleUsers maps each role of the table to its users, sorted by role.
func roleUsers(product string) [][2]string {
	var out [][2]string
	for _, r := range roleTable[product] {
		out = append(out, [2]string{r.Name, strings.Join(r.Users, ",")})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// PutRole creates or replaces role r on the secured cluster, as the admin.
func (c *Cluster) PutRole(ctx context.Context, r Role) error {
	path := "/_security/role/" + r.Name
	if c.engine.Product == "opensearch" {
		path = "/_plugins/_security/api/roles/" + r.Name
	}
	_, err := c.adminCall(ctx, http.MethodPut, path, r.Body(c.engine.Product))
	return err
}

// PutUser creates or replaces user with password and the one role, as the
// admin (OpenSearch: an internal user and the role's mapping to it).
func (c *Cluster) PutUser(ctx context.Context, user, password, role string) error {
	if c.engine.Product != "opensearch" {
		body, _ := json.Marshal(map[string]any{"password": password, "roles": []string{role}})
		_, err := c.adminCall(ctx, http.MethodPut, "/_security/user/"+user, body)
		return err
	}
	body, _ := json.Marshal(map[string]any{"password": password})
	if _, err := c.adminCall(ctx, http.MethodPut, "/_plugins/_security/api/internalusers/"+user, body); err != nil {
		return err
	}
	body, _ = json.Marshal(map[string]any{"users": []string{user}})
	_, err := c.adminCall(ctx, http.MethodPut, "/_plugins/_security/api/rolesmapping/"+role, body)
	return err
}

// adminCall sends a JSON request as the admin and returns the answer's
// body; a status of 300 or more is an error with the body.
func (c *Cluster) adminCall(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.URL()+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return b, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return b, nil
}
