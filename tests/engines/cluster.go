package engines

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Config.
const (
	DefaultNodes        = 1
	DefaultHeap         = "512m"
	DefaultStartTimeout = 3 * time.Minute
	DefaultStopTimeout  = time.Minute
)

// DefaultJavaOpts are the JVM options of a node unless Config.JavaOpts
// says otherwise. Test nodes live minutes on a machine of few cores: the
// client compiler only (no C2 recompiling the hot code) and the serial
// collector (no GC threads) halve a node's start, 12.3 s to 5.2 s and 23 to
// 9 CPU seconds for three elasticsearch-9 nodes on 2 cores. Peak throughput
// is lower; a benchmark that wants it passes its own options.
var DefaultJavaOpts = []string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}

// Config describes a cluster to start.
type Config struct {
	// Engine is the engine's name in the engine table (default DefaultEngine).
	Engine string
	// Nodes is the number of nodes, one JVM each (default DefaultNodes).
	// Every node holds data and may be elected master.
	Nodes int
	// HTTPPort is node 0's HTTP port; node i listens on HTTPPort+i. Zero
	// (the default) takes free ports.
	HTTPPort int
	// Heap is each JVM's -Xms and -Xmx (default DefaultHeap).
	Heap string
	// Dir holds the nodes' homes (data, logs). Default: a new temporary
	// directory that Close removes; a given Dir is left in place.
	Dir string
	// Settings are extra node settings for every node (e.g. shorter fault
	// detection), applied after the launcher's own.
	Settings map[string]string
	// JavaOpts replace DefaultJavaOpts when not nil (empty: the JVM's
	// own defaults). They come after the heap and before the launcher.
	JavaOpts []string
	// StartTimeout bounds Start and each node's restart (default
	// DefaultStartTimeout).
	StartTimeout time.Duration
	// Security, when not empty, starts the cluster secured and names the
	// directory (created if missing) where Start writes what a client
	// needs: ca.pem (the CA that signed the nodes' certificates, made at
	// start), a password file per user (admin.password, relay.password,
	// bulk.password, bootstrap.password, status.password: see UserAdmin
	// and the others), client.pem and client-key.pem (a client
	// certificate of ClientCertUser) and, on Elasticsearch, api-key (an
	// encoded API key with the relay's privileges). HTTP and the transport
	// then speak TLS and every request must authenticate; URLs are
	// https://. Default: off. Engines: see the package's README. On
	// elasticsearch-7 (no security plugin on Maven Central) the nodes run
	// plain behind a TLS proxy (SecurityKind TLSProxy: the client only,
	// roles are not enforced, no api-key), whose ports are HTTPPort+i.
	Security string
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if _, err := Lookup(c.Engine); err != nil {
		return fmt.Errorf("engines: Engine: %w", err)
	}
	if c.Nodes < 1 || c.Nodes > 9 {
		return fmt.Errorf("engines: Nodes %d: want 1 to 9", c.Nodes)
	}
	if e, _ := Lookup(c.Engine); c.Security != "" && SecurityKindOf(e.Name) == NoSecurity {
		return fmt.Errorf("engines: Security: %s has neither a security plugin on Maven Central nor the TLS proxy: security runs on %s",
			e.Name, strings.Join(securedEngines(), ", "))
	}
	if c.HTTPPort < 0 || c.HTTPPort+c.Nodes > 65535 {
		return fmt.Errorf("engines: HTTPPort %d: want 0 (free ports) or a port below %d", c.HTTPPort, 65535-c.Nodes)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Engine == "" {
		c.Engine = DefaultEngine
	}
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Heap == "" {
		c.Heap = DefaultHeap
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	return c
}

// Cluster is a running cluster of real nodes on 127.0.0.1. Its methods are
// safe for concurrent use; Close stops every JVM it started.
type Cluster struct {
	cfg     Config
	engine  Engine
	cp      Classpath
	name    string
	dir     string
	ownsDir bool
	http    *http.Client
	creds   *credentials // nil: not secured
	proxy   *tlsProxy    // running in front of the nodes (SecurityKind TLSProxy)

	mu    sync.Mutex
	nodes []*node
}

type node struct {
	idx           int
	name          string
	httpPort      int
	transportPort int
	home          string

	cmd    *exec.Cmd
	stdin  io.WriteCloser // the launcher exits when it closes
	exited chan struct{}
	log    *os.File
	paused bool
}

// Start prepares the engine (Prepare), starts cfg.Nodes JVMs and returns
// when the cluster has every node and is green. On error every JVM started
// is stopped again.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e, _ := Lookup(cfg.Engine)
	// Behind the TLS proxy the nodes run plain.
	cp, err := prepare(ctx, e, cfg.Security != "" && SecurityKindOf(e.Name) == EngineSecurity)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, engine: e, cp: cp, dir: cfg.Dir, http: &http.Client{Timeout: 30 * time.Second}}
	if cfg.Security != "" {
		if c.creds, err = newCredentials(cfg.Security); err != nil {
			return nil, fmt.Errorf("engines: security credentials in %s: %w", cfg.Security, err)
		}
		c.http.Transport = &http.Transport{TLSClientConfig: c.creds.tlsConfig()}
	}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "escf-"+e.Name+"-"); err != nil {
			return nil, err
		}
		c.ownsDir = true
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c.name = "escf-" + e.Name + "-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	// A free port found here may be taken by another process before the
	// JVM binds it: such a start is tried again on other ports.
	for attempt := 1; ; attempt++ {
		err = c.startNodes(ctx)
		if err == nil && c.SecurityKind() == EngineSecurity {
			err = c.afterSecureStart(ctx)
		}
		if err == nil {
			return c, nil
		}
		c.stopAll()
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			if c.ownsDir {
				os.RemoveAll(c.dir)
			}
			return nil, fmt.Errorf("start %d-node %s: %w", cfg.Nodes, e, err)
		}
	}
}

// errPortTaken marks a node that could not bind its ports.
var errPortTaken = errors.New("a port was taken")

// startNodes picks the nodes' ports, starts every JVM on fresh data and
// waits for green.
func (c *Cluster) startNodes(ctx context.Context) error {
	c.nodes = nil
	for i := 0; i < c.cfg.Nodes; i++ {
		n := &node{idx: i, name: "n" + strconv.Itoa(i), home: filepath.Join(c.dir, "n"+strconv.Itoa(i))}
		if err := os.RemoveAll(n.home); err != nil {
			return err
		}
		var err error
		if c.cfg.HTTPPort > 0 && c.SecurityKind() != TLSProxy {
			n.httpPort = c.cfg.HTTPPort + i
		} else if n.httpPort, err = freePort(); err != nil {
			return err
		}
		if n.transportPort, err = freePort(); err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
	}
	c.mu.Lock()
	var err error
	for _, n := range c.nodes {
		if err = c.spawn(n, true); err != nil {
			break
		}
	}
	c.mu.Unlock()
	if err == nil && c.SecurityKind() == TLSProxy {
		err = c.startTLSProxy(ctx)
	}
	if err != nil {
		return err
	}
	return c.waitHealth(ctx, 0, "green")
}

// spawn starts node n's JVM; c.mu is held.
func (c *Cluster) spawn(n *node, first bool) error {
	if err := os.MkdirAll(filepath.Join(n.home, "config"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(n.home, "tmp"), 0o755); err != nil {
		return err
	}
	seeds := make([]string, len(c.nodes))
	names := make([]string, len(c.nodes))
	for i, o := range c.nodes {
		seeds[i] = "127.0.0.1:" + strconv.Itoa(o.transportPort)
		names[i] = o.name
	}
	settings := []string{
		"cluster.name=" + c.name,
		"node.name=" + n.name,
		"network.host=127.0.0.1",
		"http.port=" + strconv.Itoa(n.httpPort),
		"transport.port=" + strconv.Itoa(n.transportPort),
		// The machine's free disk says nothing about the test.
		"cluster.routing.allocation.disk.threshold_enabled=false",
		// As Elasticsearch's own REST test clusters: wildcard deletes.
		"action.destructive_requires_name=false",
	}
	if len(c.nodes) == 1 {
		settings = append(settings, "discovery.type=single-node")
	} else {
		settings = append(settings, "discovery.seed_hosts="+strings.Join(seeds, ","))
		if first {
			// Only a cluster's first start bootstraps it; a restarted node
			// finds the elected master through the seeds.
			key := "cluster.initial_master_nodes"
			if c.engine.Product == "opensearch" {
				key = "cluster.initial_cluster_manager_nodes"
			}
			settings = append(settings, key+"="+strings.Join(names, ","))
		}
	}
	var plugins []string
	if c.SecurityKind() == EngineSecurity {
		sec, err := c.creds.writeNodeConfig(c.engine, c.cp, n.home)
		if err != nil {
			return err
		}
		settings = append(settings, sec...)
		plugins = securityPluginClasses[c.engine.Product]
	}
	for k, v := range c.cfg.Settings {
		settings = append(settings, k+"="+v)
	}
	args := []string{
		"-Xms" + c.cfg.Heap, "-Xmx" + c.cfg.Heap, "-Xss1m",
		"-XX:-HeapDumpOnOutOfMemoryError",
		"-Djava.io.tmpdir=" + filepath.Join(n.home, "tmp"),
		"-Dfile.encoding=UTF-8", "-Djava.awt.headless=true",
		"-Dlog4j2.disable.jmx=true", "-Dlog4j.shutdownHookEnabled=false",
		"-Descf.exitOnStdinEof=true",
	}
	if len(plugins) > 0 {
		args = append(args, "-Descf.plugins="+strings.Join(plugins, ","))
	}
	if javaMajor(c.cp.JavaHome) >= 21 {
		args = append(args, "--enable-native-access=ALL-UNNAMED")
	}
	if c.cfg.JavaOpts != nil {
		args = append(args, c.cfg.JavaOpts...)
	} else {
		args = append(args, DefaultJavaOpts...)
	}
	args = append(args, "-cp", c.cp.Path, "escf.engines.Launcher", "--product", c.engine.Product, "--home", n.home)
	for _, s := range settings {
		args = append(args, "--setting", s)
	}
	log, err := os.OpenFile(filepath.Join(n.home, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "\n=== escf-engines: starting %s of %s at %s\n", n.name, c.engine, time.Now().Format(time.RFC3339))
	cmd := exec.Command(filepath.Join(c.cp.JavaHome, "bin", "java"), args...)
	cmd.Dir = n.home
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		log.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	n.cmd, n.stdin, n.log, n.paused = cmd, stdin, log, false
	n.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}, log *os.File) {
		_ = cmd.Wait()
		log.Close()
		close(exited)
	}(cmd, n.exited, log)
	return nil
}

// waitHealth waits until node via reports the cluster with every running
// node and at least the given status ("green", "yellow"), failing early
// when a JVM exits.
func (c *Cluster) waitHealth(ctx context.Context, via int, status string) error {
	running := 0
	for i := range c.nodes {
		if c.Running(i) {
			running++
		}
	}
	url := fmt.Sprintf("%s/_cluster/health?wait_for_status=%s&wait_for_nodes=%d&timeout=2s", c.NodeURL(via), status, running)
	var last string
	for {
		if err := c.exitedNode(); err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.do(req)
		if err == nil {
			var h struct {
				Status   string `json:"status"`
				TimedOut bool   `json:"timed_out"`
				Nodes    int    `json:"number_of_nodes"`
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && json.Unmarshal(b, &h) == nil && !h.TimedOut {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not %s with %d nodes (via %s): %w; last answer: %s", status, running, c.nodes[via].name, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// exitedNode returns an error with the log's tail if a node that should be
// running has exited.
func (c *Cluster) exitedNode() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.cmd == nil {
			continue
		}
		select {
		case <-n.exited:
			b, _ := os.ReadFile(filepath.Join(n.home, "node.log"))
			err := fmt.Errorf("node %s exited (%v); the end of %s:\n%s", n.name, n.cmd.ProcessState, filepath.Join(n.home, "node.log"), tail(string(b), 30))
			if strings.Contains(string(b), "Address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		default:
		}
	}
	return nil
}

// Engine is the engine the cluster runs.
func (c *Cluster) Engine() Engine { return c.engine }

// Name is the cluster.name.
func (c *Cluster) Name() string { return c.name }

// Nodes is the number of nodes (running or not).
func (c *Cluster) Nodes() int { return len(c.nodes) }

// URL is node 0's HTTP URL.
func (c *Cluster) URL() string { return c.NodeURL(0) }

// NodeURL is node i's HTTP URL, e.g. http://127.0.0.1:9200
// (https:// when secured; behind the TLS proxy, the proxy's port of node
// i).
func (c *Cluster) NodeURL(i int) string {
	if c.proxy != nil {
		return c.proxy.url(i)
	}
	scheme := "http"
	if c.creds != nil {
		scheme = "https"
	}
	return scheme + "://127.0.0.1:" + strconv.Itoa(c.nodes[i].httpPort)
}

// URLs are every node's HTTP URL, node 0 first.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.nodes))
	for i := range c.nodes {
		out[i] = c.NodeURL(i)
	}
	return out
}

// NodeName is node i's node.name ("n0", "n1", …).
func (c *Cluster) NodeName(i int) string { return c.nodes[i].name }

// NodeIndex returns the index of the node called name, or -1.
func (c *Cluster) NodeIndex(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// LogFile is the file node i's JVM writes its output to.
func (c *Cluster) LogFile(i int) string { return filepath.Join(c.nodes[i].home, "node.log") }

// PID is node i's JVM process id, 0 if it is not running.
func (c *Cluster) PID(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// ErrNotRunning is returned by the node controls for a node that is not
// running.
var ErrNotRunning = errors.New("node is not running")

func (c *Cluster) running(i int) (*node, error) {
	if i < 0 || i >= len(c.nodes) {
		return nil, fmt.Errorf("node %d: the cluster has nodes 0 to %d", i, len(c.nodes)-1)
	}
	n := c.nodes[i]
	if n.cmd == nil {
		return nil, fmt.Errorf("%s: %w", n.name, ErrNotRunning)
	}
	select {
	case <-n.exited:
		return nil, fmt.Errorf("%s: %w (it exited)", n.name, ErrNotRunning)
	default:
	}
	return n, nil
}

// Kill sends SIGKILL to node i's JVM and waits until it is gone: no
// shutdown, what it had not fsynced is lost, as in a crash.
func (c *Cluster) Kill(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.running(i)
	if err != nil {
		return err
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	_ = n.stdin.Close()
	n.cmd = nil
	return nil
}

// Stop shuts node i down cleanly (SIGTERM: the launcher closes the node),
// waiting at most DefaultStopTimeout before SIGKILL.
func (c *Cluster) Stop(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.running(i)
	if err != nil {
		return err
	}
	c.stop(n)
	return nil
}

func (c *Cluster) stop(n *node) {
	if n.paused {
		_ = n.cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(DefaultStopTimeout):
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.exited
	}
	_ = n.stdin.Close()
	n.cmd = nil
}

// Start starts node i again (after Kill or Stop) on its data, ports and
// settings, and waits until it is in the cluster with every running node
// (not for green: the caller decides what to wait for, see WaitGreen).
func (c *Cluster) Start(ctx context.Context, i int) error {
	c.mu.Lock()
	if i < 0 || i >= len(c.nodes) {
		c.mu.Unlock()
		return fmt.Errorf("node %d: the cluster has nodes 0 to %d", i, len(c.nodes)-1)
	}
	n := c.nodes[i]
	if n.cmd != nil {
		c.mu.Unlock()
		return fmt.Errorf("%s is running", n.name)
	}
	err := c.spawn(n, false)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	return c.waitHealth(ctx, i, "red")
}

// Pause stops node i's JVM with SIGSTOP: it holds its connections and
// answers nothing, like a node in a long GC pause or cut off the network.
func (c *Cluster) Pause(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.running(i)
	if err != nil {
		return err
	}
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	n.paused = true
	return nil
}

// Resume continues a paused node (SIGCONT).
func (c *Cluster) Resume(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.running(i)
	if err != nil {
		return err
	}
	if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	n.paused = false
	return nil
}

// Running reports whether node i's JVM runs (paused counts as running).
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.running(i)
	return err == nil
}

// WaitGreen waits until the cluster, asked through a running node, has
// every running node and is green.
func (c *Cluster) WaitGreen(ctx context.Context) error {
	via := -1
	for i := range c.nodes {
		if c.Running(i) {
			via = i
			break
		}
	}
	if via < 0 {
		return fmt.Errorf("no node is running")
	}
	return c.waitHealth(ctx, via, "green")
}

// ShardCopy is one copy of a shard as _cat/shards lists it.
type ShardCopy struct {
	Shard   int
	Primary bool
	State   string
	// Node is the index of the node holding it, -1 if unassigned.
	Node int
}

// Shards lists the copies of an index's shards, asked through node via.
func (c *Cluster) Shards(ctx context.Context, via int, index string) ([]ShardCopy, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.NodeURL(via)+"/_cat/shards/"+index+"?format=json&h=shard,prirep,state,node", nil)
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("_cat/shards/%s: HTTP %d: %s", index, resp.StatusCode, b)
	}
	var rows []struct {
		Shard  string `json:"shard"`
		PriRep string `json:"prirep"`
		State  string `json:"state"`
		Node   string `json:"node"`
	}
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, fmt.Errorf("_cat/shards/%s: %w", index, err)
	}
	out := make([]ShardCopy, 0, len(rows))
	for _, r := range rows {
		n, _ := strconv.Atoi(r.Shard)
		out = append(out, ShardCopy{Shard: n, Primary: r.PriRep == "p", State: r.State, Node: c.NodeIndex(strings.Fields(r.Node + " ")[0])})
	}
	return out, nil
}

// Close stops every running node (SIGTERM, then SIGKILL after
// DefaultStopTimeout), concurrently, then the TLS proxy, and removes Dir
// if Start made it.
func (c *Cluster) Close() error {
	c.stopAll()
	if c.ownsDir {
		return os.RemoveAll(c.dir)
	}
	return nil
}

// stopAll stops every running node, concurrently.
func (c *Cluster) stopAll() {
	c.mu.Lock()
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		if n.cmd == nil {
			continue
		}
		wg.Add(1)
		go func(n *node) {
			defer wg.Done()
			c.stop(n)
		}(n)
	}
	wg.Wait()
	c.proxy.stop() // stays for NodeURL; a new start replaces it
	c.mu.Unlock()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
