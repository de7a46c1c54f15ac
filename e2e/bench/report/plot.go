package report

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/result"
)

var (
	serveTime = func(r result.Run, t result.Tool) float64 { return neverIsInf(t.ServeSeconds) }
	p50       = func(r result.Run, t result.Tool) float64 { return result.Percentile(t.Latencies, 50) }
	p99       = func(r result.Run, t result.Tool) float64 { return result.Percentile(t.Latencies, 99) }
	idle      = func(r result.Run, t result.Tool) float64 { return t.IdlePerMinute() }
	idleHour  = func(r result.Run, t result.Tool) float64 { return t.HourPerMinute() }
	rss       = func(r result.Run, t result.Tool) float64 { return t.PeakRSSMB }
)

var toolColor = map[string]color.Color{
	result.KubeProxyIPVS: color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	result.KubeProxyNFT:  color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	result.KubeIPVS:      color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
}

// series is one line of a panel.
type series struct {
	label  string
	dashed bool
	value  func(r result.Run, t result.Tool) float64
}

// Plot draws change latency, time to serve, CPU at rest and peak RSS against
// N (the medians of the first variant's boots), one line per tool, into a
// PNG at path.
func Plot(runs []result.Run, path string) error {
	runs = sorted(runs)
	var first []result.Run
	for _, r := range runs {
		if variant(r) == variant(runs[0]) {
			first = append(first, r)
		}
	}
	runs = first
	panels := []struct {
		title, unit string
		log         bool
		series      []series
	}{
		{"one endpoint change: p50 (solid), p99 (dashed)", "seconds (log)", true, []series{{"p50", false, p50}, {"p99", true, p99}}},
		{"time to serve", "seconds", false, []series{{"", false, serveTime}}},
		{"CPU at rest: idle window (solid), an hour with drift repair (dashed)", "CPU-seconds a minute", false,
			[]series{{"window", false, idle}, {"hour", true, idleHour}}},
		{"peak RSS", "MB", false, []series{{"", false, rss}}},
	}
	grid := [][]*plot.Plot{make([]*plot.Plot, 2), make([]*plot.Plot, 2)}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "N Services (× 10 endpoints)"
		p.Y.Label.Text = pn.unit
		p.Legend.Top, p.Legend.Left = true, true
		if pn.log {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		for _, tool := range Tools {
			for _, s := range pn.series {
				xys := points(runs, tool, s.value, pn.log)
				if len(xys) == 0 {
					continue
				}
				line, pts, err := plotter.NewLinePoints(xys)
				if err != nil {
					return fmt.Errorf("plot %s: %w", pn.title, err)
				}
				line.Color, pts.Color = toolColor[tool], toolColor[tool]
				if s.dashed {
					line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
					pts.Shape = draw.BoxGlyph{}
				}
				p.Add(line, pts)
				if !s.dashed {
					p.Legend.Add(ToolTitle[tool], line, pts)
				}
			}
		}
		if !pn.log {
			p.Y.Min = 0 // a linear axis from zero: differences look as big as they are
		}
		grid[i/2][i%2] = p
	}
	img := vgimg.New(vg.Points(1100), vg.Points(780))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Points(18), PadY: vg.Points(18),
		PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j := range grid[i] {
			grid[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// points is one tool's line; a log axis drops values it cannot show.
func points(runs []result.Run, tool string, value func(result.Run, result.Tool) float64, log bool) plotter.XYs {
	var xys plotter.XYs
	for _, r := range runs {
		v := statOf(r, tool, value).med
		if math.IsNaN(v) || math.IsInf(v, 0) || log && v <= 0 {
			continue
		}
		xys = append(xys, plotter.XY{X: float64(r.N), Y: v})
	}
	return xys
}
