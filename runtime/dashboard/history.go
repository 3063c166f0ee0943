package dashboard

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// sample is one reading of the store's Stats.
type sample struct {
	At    time.Time
	Stats relay.Stats
}

// ring keeps the last len(buf) samples.
type ring struct {
	buf  []sample
	next int
	full bool
	// stale makes last report no sample, so the next page view samples
	// (after an action changed the counts).
	stale bool
}

func newRing(n int) *ring { return &ring{buf: make([]sample, n)} }

func (r *ring) add(s sample) {
	r.stale = false
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

func (r *ring) last() (sample, bool) {
	if r.stale || !r.full && r.next == 0 {
		return sample{}, false
	}
	return r.buf[(r.next+len(r.buf)-1)%len(r.buf)], true
}

// all returns the samples, oldest first, in a new slice.
func (r *ring) all() []sample {
	if !r.full {
		return append([]sample(nil), r.buf[:r.next]...)
	}
	out := make([]sample, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// chart is a sparkline, drawn by the template as an SVG polyline.
type chart struct {
	Points   string // "x,y x,y ..." in a chartWidth × chartHeight box
	Area     string // the polygon under the line
	Min, Max string
	Last     string
	Span     string // the time the samples cover
	Samples  int
}

const (
	chartWidth  = 300
	chartHeight = 60
)

// newChart plots value over the samples, spaced by their times.
func newChart(samples []sample, value func(relay.Stats) float64, format func(float64) string) chart {
	c := chart{Samples: len(samples)}
	if len(samples) == 0 {
		return c
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range samples {
		v := value(s.Stats)
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	c.Min, c.Max, c.Last = format(lo), format(hi), format(value(samples[len(samples)-1].Stats))
	t0, t1 := samples[0].At, samples[len(samples)-1].At
	c.Span = formatDuration(t1.Sub(t0))
	if lo > 0 {
		lo = 0 // the axis starts at zero, so a flat backlog does not look empty
	}
	var b strings.Builder
	for i, s := range samples {
		x := float64(chartWidth)
		if t1.After(t0) {
			x = float64(s.At.Sub(t0)) / float64(t1.Sub(t0)) * chartWidth
		}
		y := float64(chartHeight - 2)
		if hi > lo {
			y = 2 + (1-(value(s.Stats)-lo)/(hi-lo))*(chartHeight-4)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
	}
	c.Points = b.String()
	if len(samples) == 1 {
		// One sample: a flat line across.
		y := c.Points[strings.IndexByte(c.Points, ',')+1:]
		c.Points = "0," + y + " " + strconv.Itoa(chartWidth) + "," + y
	}
	first := c.Points[:strings.IndexByte(c.Points, ',')]
	last := c.Points[strings.LastIndexByte(c.Points, ' ')+1:]
	last = last[:strings.IndexByte(last, ',')]
	c.Area = first + "," + strconv.Itoa(chartHeight) + " " + c.Points + " " + last + "," + strconv.Itoa(chartHeight)
	return c
}

func formatCount(v float64) string { return groupDigits(int64(v)) }

func formatSeconds(v float64) string { return formatDuration(time.Duration(v * float64(time.Second))) }

// groupDigits writes n with thousands separators: 100000 → "100,000".
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// formatDuration is a short human duration: "0s", "850ms", "42s", "3m12s",
// "5h03m", "2d4h".
func formatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"count": groupDigits,
	"size":  formatBytes,
	"dur":   formatDuration,
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return formatDuration(time.Since(t)) + " ago"
	},
	"trunc": func(n int, s string) string {
		if len([]rune(s)) <= n {
			return s
		}
		return string([]rune(s)[:n]) + "…"
	},
	"w": func() int { return chartWidth },
	// dict builds a map from key, value pairs, to pass several values to a
	// shared template.
	"dict": func(kv ...any) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, fmt.Errorf("dict: odd number of arguments")
		}
		m := make(map[string]any, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			k, ok := kv[i].(string)
			if !ok {
				return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
			}
			m[k] = kv[i+1]
		}
		return m, nil
	},
	"list": func(e *sqlstore.Entry) []sqlstore.Entry { return []sqlstore.Entry{*e} },
	"h":    func() int { return chartHeight },
}

// formatBytes writes n bytes in binary units: "512 B", "3.2 MiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
