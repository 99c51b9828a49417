package status

import (
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"
)

// RenderPage writes the status page: a self-contained HTML document (inline
// CSS, no scripts, no external assets) showing the report and two charts,
// events/s and lag, over history (oldest first). Times are shown relative
// to r.At. The page reloads itself every 10 seconds.
func RenderPage(w io.Writer, r Report, history []Sample) error {
	if r.At.IsZero() {
		r.At = time.Now()
	}
	return page.Execute(w, pageData{
		Report: r,
		Charts: []chart{
			newChart("Events per second", history, func(s Sample) float64 { return s.EventsPerSecond }),
			newChart("Lag (largest shard or group)", history, func(s Sample) float64 { return float64(s.Lag) }),
		},
	})
}

type pageData struct {
	Report
	Charts []chart
}

// chart is one plot in a chartW×chartH box, y from 0 (bottom) to the
// largest value; x spans the samples' times.
type chart struct {
	Title, Max, Now, Span string
	Line, Area            string // SVG points; empty with fewer than 2 samples
}

const chartW, chartH = 600.0, 150.0

func newChart(title string, h []Sample, val func(Sample) float64) chart {
	c := chart{Title: title}
	if len(h) < 2 {
		return c
	}
	top := 0.0
	for _, s := range h {
		top = max(top, val(s))
	}
	c.Max, c.Now = short(top), short(val(h[len(h)-1]))
	top = max(top, 1e-9)
	t0, span := h[0].At, h[len(h)-1].At.Sub(h[0].At)
	c.Span = age(span)
	pts := make([]string, len(h))
	for i, s := range h {
		x := float64(i) / float64(len(h)-1)
		if span > 0 {
			x = float64(s.At.Sub(t0)) / float64(span)
		}
		pts[i] = fmt.Sprintf("%.1f,%.1f", x*chartW, (1-val(s)/top)*chartH)
	}
	c.Line = strings.Join(pts, " ")
	c.Area = fmt.Sprintf("0,%g %s %g,%g", chartH, c.Line, chartW, chartH)
	return c
}

// short prints a chart value briefly: 0, 3.5, 42, 1.2k, 3.4M.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 0, 64) + "k"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case v >= 10 || v == 0:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// num groups digits: 1234567 → 1,234,567.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"num":   num,
	"age":   func(s Seconds) string { return age(s.Duration()) },
	"ts":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"deref": func(p *int64) int64 { return *p },
	"ago": func(t, now time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return age(now.Sub(t)) + " ago"
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="10">
<title>{{if .Healthy}}✓{{else}}✗{{end}} {{.Feed}} · es-changefeed</title>
<style>
:root{--fg:#1f2328;--mute:#656d76;--line:#d8dee4;--bg:#f6f8fa;--ok:#1a7f37;--bad:#cf222e;--accent:#0969da}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1180px;margin:0 auto;padding:16px}
header{display:flex;flex-wrap:wrap;align-items:center;gap:8px 14px}
h1{font-size:22px;margin:0;overflow-wrap:anywhere}
h2{font-size:15px;margin:0 0 8px}
.badge{padding:2px 10px;border-radius:12px;color:#fff;font-weight:600;font-size:13px}
.ok{background:var(--ok)}.bad{background:var(--bad)}
.at{color:var(--mute);margin-left:auto}
.problems{margin:12px 0 0;padding:10px 12px 10px 30px;background:#ffebe9;border:1px solid #ffcecb;border-radius:6px;color:#82071e}
.card{background:#fff;border:1px solid var(--line);border-radius:6px;padding:12px 14px;margin-top:14px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:0 14px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0}
dt{color:var(--mute)}dd{margin:0;overflow-wrap:anywhere}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%}
th,td{padding:5px 8px;border-bottom:1px solid var(--line);text-align:left;white-space:nowrap}
th{color:var(--mute);font-weight:600;font-size:12px;text-transform:uppercase;letter-spacing:.03em}
th.n,td.n{text-align:right;font-variant-numeric:tabular-nums}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px}
.warn{color:var(--bad);font-weight:600}.mute{color:var(--mute)}
.plot{display:grid;grid-template-columns:max-content 1fr;gap:0 6px;font-size:12px;color:var(--mute)}
.plot .y{display:flex;flex-direction:column;justify-content:space-between;text-align:right}
.plot svg{width:100%;height:150px;display:block;background:#fbfcfd;border-left:1px solid #8c959f;border-bottom:1px solid #8c959f}
.plot .x{grid-column:2;display:flex;justify-content:space-between}
.empty{height:150px;display:flex;align-items:center;justify-content:center;color:var(--mute);background:#fbfcfd;border:1px dashed var(--line)}
</style></head>
<body><main>
<header><h1>{{.Feed}}</h1>
{{if .Healthy}}<span class="badge ok">healthy</span>{{else}}<span class="badge bad">UNHEALTHY</span>{{end}}
<span class="at">at {{ts .At}}</span></header>
{{with .Problems}}<ul class="problems">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}

<div class="grid">
<section class="card"><h2>Relay</h2><dl>
<dt>lease</dt><dd>{{if .Lease.Held}}held by <b class="mono">{{.Lease.Owner}}</b>{{if not .Lease.Since.IsZero}} since {{ts .Lease.Since}} ({{ago .Lease.Since .At}}){{end}}, expires in {{age .Lease.TTL}} unless renewed{{else}}<span class="warn">free: no relay leads</span>{{end}}</dd>
{{with .Backpressure}}<dt>backpressure</dt><dd class="warn">ON since {{.}} (the relay pauses reading)</dd>{{end}}
{{with .Cluster}}<dt>cluster</dt><dd>{{.}}</dd>{{end}}
{{with .Created}}<dt>created</dt><dd>{{.}}</dd>{{end}}
<dt>dead letters</dt><dd{{if .DeadLetters}} class="warn"{{end}}>{{num .DeadLetters}}</dd>
</dl></section>
<section class="card"><h2>Stream</h2><dl>
<dt>length</dt><dd>{{num .Stream.Length}} entries{{if not .Stream.Length}} (empty){{end}}</dd>
<dt>entries added</dt><dd>{{num .Stream.EntriesAdded}} ever</dd>
{{if .Stream.Length}}<dt>first</dt><dd><span class="mono">{{.Stream.FirstID}}</span> <span class="mute">({{age .Stream.FirstAge}} old)</span></dd>
<dt>last</dt><dd><span class="mono">{{.Stream.LastID}}</span> <span class="mute">({{age .Stream.LastAge}} old)</span></dd>{{end}}
</dl></section>
</div>

<div class="grid">{{range .Charts}}
<section class="card"><h2>{{.Title}}{{if .Line}} <span class="mute">· now {{.Now}}</span>{{end}}</h2>
{{if .Line}}<div class="plot"><div class="y"><span>{{.Max}}</span><span>0</span></div>
<svg viewBox="0 0 600 150" preserveAspectRatio="none" role="img" aria-label="{{.Title}}, max {{.Max}} over {{.Span}}">
<line x1="0" y1="75" x2="600" y2="75" stroke="#d8dee4" stroke-dasharray="4 4" vector-effect="non-scaling-stroke"/>
<polygon points="{{.Area}}" fill="#0969da" fill-opacity=".12"/>
<polyline points="{{.Line}}" fill="none" stroke="#0969da" stroke-width="2" stroke-linejoin="round" vector-effect="non-scaling-stroke"/>
</svg><div class="x"><span>{{.Span}} ago</span><span>now</span></div></div>
{{else}}<div class="empty">collecting data…</div>{{end}}
</section>{{end}}
</div>

<section class="card"><h2>Indices and shards</h2><div class="scroll"><table>
<tr><th>index</th><th class="n">shard</th><th class="n">checkpoint</th><th class="n">global checkpoint</th><th class="n">lag</th><th>last commit</th><th class="n">undelivered since scan</th></tr>
{{range $ix := .Indices}}{{range .Shards}}<tr><td><span class="mono">{{$ix.Name}}</span>{{if $ix.Target}} <span class="mute">→ {{$ix.Target}}</span>{{end}}{{if $ix.Missing}} <span class="warn">missing in the cluster</span>{{end}}</td>
<td class="n">{{.Shard}}</td><td class="n">{{num .Checkpoint}}</td>
{{if .GlobalCheckpoint}}<td class="n">{{num (deref .GlobalCheckpoint)}}</td><td class="n">{{num (deref .Lag)}}</td>{{else}}<td class="n mute">–</td><td class="n mute">–</td>{{end}}
<td>{{ago .LastCommit $.At}}</td><td class="n">{{num .Gap}}</td></tr>
{{end}}{{else}}<tr><td colspan="7" class="mute">no index followed yet</td></tr>{{end}}
</table></div></section>

<section class="card"><h2>Consumer groups</h2><div class="scroll"><table>
<tr><th>group</th><th class="n">lag</th><th class="n">pending</th><th class="n">oldest pending idle</th><th class="n">history lost</th><th>last delivered</th><th>consumers</th></tr>
{{range .Groups}}<tr><td class="mono">{{.Name}}</td><td class="n">{{num .Lag}}</td><td class="n">{{num .Pending}}</td>
<td class="n">{{if .Pending}}{{age .OldestPendingIdle}}{{else}}<span class="mute">–</span>{{end}}</td>
<td class="n">{{if gt .HistoryLost 0}}<span class="badge bad">{{num .HistoryLost}} entries</span>{{else if lt .HistoryLost 0}}<span class="badge bad">yes</span>{{else}}<span class="mute">–</span>{{end}}</td><td class="mono">{{.LastDelivered}}</td>
<td>{{range $i, $c := .Consumers}}{{if $i}}<br>{{end}}<span class="mono">{{$c.Name}}</span> <span class="mute">{{num $c.Pending}} pending, idle {{age $c.Idle}}</span>{{else}}<span class="mute">none</span>{{end}}</td></tr>
{{else}}<tr><td colspan="7" class="mute">no consumer group</td></tr>{{end}}
</table></div></section>
<p class="mute">Refreshes every 10 s · <a href="status.json">status.json</a> · <a href="metrics">metrics</a></p>
</main></body></html>
`))
