//! The shootout chart: requests per second against concurrency, one line per target, as SVG.
//!
//! Drawn with `plotters`' SVG backend, which writes text as `<text>` elements, so no font file
//! is read and the output is the same on every machine. The chart is 900×560: the title across
//! the top, the plot on the left with the y axis from 0, and the legend in a column on the right
//! where it never hides a line. Each series gets its own colour and marker shape (colour-blind
//! safe: the markers tell lines apart even in grey).

use plotters::coord::Shift;
use plotters::element::{Drawable, PointCollection};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters_backend::{BackendCoord, DrawingErrorKind};

/// The chart's size in pixels.
pub(crate) const WIDTH: u32 = 900;
pub(crate) const HEIGHT: u32 = 560;

/// One line of the chart: a target's measured throughput at each concurrency level.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    /// The legend entry (a target name).
    pub name: String,
    /// `(concurrency, requests per second)`, in any order (drawn sorted by concurrency).
    pub points: Vec<(u32, f64)>,
}

/// Line colours: the Okabe–Ito palette (without its yellow, too pale on white) plus two darker
/// tones, all distinguishable with the common colour-vision deficiencies.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xD5, 0x5E, 0x00), // vermilion
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0x33, 0x33, 0x33), // near black
    RGBColor(0x8C, 0x56, 0x4B), // brown
];

/// Marker shapes; series `i` gets shape `(i + i / 8) % 8`, so the first 64 (colour, shape) pairs
/// are all different.
#[derive(Clone, Copy)]
enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
    HollowCircle,
    HollowSquare,
    HollowTriangle,
    HollowDiamond,
}

const MARKERS: [Marker; 8] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Diamond,
    Marker::HollowCircle,
    Marker::HollowSquare,
    Marker::HollowTriangle,
    Marker::HollowDiamond,
];

const LEGEND_ROW: i32 = 26;
const FONT: &str = "sans-serif";
const GRID: RGBColor = RGBColor(0xE4, 0xE4, 0xE4);
const INK: RGBColor = RGBColor(0x22, 0x22, 0x22);

/// Renders the chart and returns the SVG text (the caller writes the file).
///
/// `x_label` and `y_label` are the axis titles, with units, e.g. "concurrent connections" and
/// "requests per second". Control characters in any text are shown as spaces.
///
/// Errors, naming the offending series: no series at all, a series without points or without a
/// name, and a requests/s value that is negative, NaN or infinite (a measurement that produced
/// one is broken, and a chart that quietly clamped it would mislead).
pub(crate) fn render_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<String, String> {
    check(series)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(
            &root,
            &clean(title),
            &clean(x_label),
            &clean(y_label),
            series,
        )
        .map_err(|e| format!("cannot draw the chart: {e}"))?;
        root.present()
            .map_err(|e| format!("cannot draw the chart: {e}"))?;
    }
    Ok(with_svg_title(svg, &clean(title)))
}

/// Refuses what cannot be drawn honestly.
fn check(series: &[Series]) -> Result<(), String> {
    if series.is_empty() {
        return Err("nothing to plot: no series".to_string());
    }
    for s in series {
        if s.name.trim().is_empty() {
            return Err("cannot plot a series without a name".to_string());
        }
        if s.points.is_empty() {
            return Err(format!("cannot plot series '{}': it has no points", s.name));
        }
        if let Some(&(x, y)) = s.points.iter().find(|p| !(p.1.is_finite() && p.1 >= 0.0)) {
            return Err(format!(
                "cannot plot series '{}': {y} requests/s at concurrency {x} \
                 (must be a finite number ≥ 0)",
                s.name
            ));
        }
    }
    Ok(())
}

/// Adds a `<title>` element, which a browser shows as the tab's name and a screen reader reads.
fn with_svg_title(svg: String, title: &str) -> String {
    let Some(end) = svg.find('>') else {
        return svg;
    };
    let mut escaped = String::with_capacity(title.len());
    for c in title.chars() {
        match c {
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '&' => escaped.push_str("&amp;"),
            c => escaped.push(c),
        }
    }
    format!(
        "{}\n<title>{escaped}</title>{}",
        &svg[..=end],
        &svg[end + 1..]
    )
}

/// XML has no place for most control characters; a title is one line anyway.
fn clean(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

type DrawResult<'a> = Result<(), Box<dyn std::error::Error + 'a>>;

fn draw<'a>(
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> DrawResult<'a> {
    root.fill(&WHITE)?;
    root.draw(&Text::new(
        title.to_string(),
        (WIDTH as i32 / 2, 18),
        TextStyle::from((FONT, title_size(title)).into_font().style(FontStyle::Bold))
            .color(&INK)
            .pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    let body = root.margin(52, 16, 12, 0);
    let (plot_area, legend_area) = body.split_horizontally(WIDTH - legend_width(series));
    draw_plot(&plot_area, x_label, y_label, series)?;
    draw_legend(&legend_area, series)
}

/// 22 px, smaller for a title too long to fit across the chart at that size.
fn title_size(title: &str) -> f64 {
    let chars = title.chars().count().max(1) as f64;
    (22.0 * 72.0 / chars).clamp(11.0, 22.0)
}

/// Wide enough for the longest name (estimated at 8 px a character), within bounds.
fn legend_width(series: &[Series]) -> u32 {
    let longest = series
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0) as u32;
    (longest * 8 + 64).clamp(140, 280)
}

fn draw_plot<'a>(
    area: &DrawingArea<SVGBackend<'a>, Shift>,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> DrawResult<'a> {
    let (x_lo, x_hi) = x_range(series);
    let (y_hi, y_step) = y_axis(series);
    let mut chart = ChartBuilder::on(area)
        .margin_top(8)
        .margin_right(20)
        .x_label_area_size(56)
        .y_label_area_size(92)
        .build_cartesian_2d(x_lo..x_hi, 0.0..y_hi)?;
    let x_fmt = |x: &u32| thousands(f64::from(*x));
    let y_fmt = |y: &f64| {
        if y_hi >= 10.0 {
            thousands(*y)
        } else {
            format!("{y:.2}")
        }
    };
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(10)
        .y_labels((y_hi / y_step).round() as usize + 1)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, 14).into_font().color(&INK))
        .axis_desc_style((FONT, 16).into_font().color(&INK))
        .axis_style(INK.stroke_width(1))
        .bold_line_style(GRID.stroke_width(1))
        .light_line_style(TRANSPARENT)
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let (colour, marker) = look(i);
        let mut points = s.points.clone();
        points.sort_by_key(|p| p.0);
        chart.draw_series(LineSeries::new(
            points.iter().copied(),
            colour.stroke_width(2),
        ))?;
        chart.draw_series(points.iter().map(|&p| marker_at(p, marker, colour)))?;
    }
    Ok(())
}

fn draw_legend<'a>(area: &DrawingArea<SVGBackend<'a>, Shift>, series: &[Series]) -> DrawResult<'a> {
    let text = TextStyle::from((FONT, 15).into_font())
        .color(&INK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, s) in series.iter().enumerate() {
        let (colour, marker) = look(i);
        let y = 20 + i as i32 * LEGEND_ROW;
        area.draw(&PathElement::new(
            vec![(4, y), (36, y)],
            colour.stroke_width(2),
        ))?;
        area.draw(&marker_at((20, y), marker, colour))?;
        area.draw(&Text::new(s.name.clone(), (46, y), text.clone()))?;
    }
    Ok(())
}

/// Series `i`'s colour and marker.
fn look(i: usize) -> (RGBColor, Marker) {
    (
        COLOURS[i % COLOURS.len()],
        MARKERS[(i + i / COLOURS.len()) % MARKERS.len()],
    )
}

/// A marker centred on a data point, about 9 px across. Hollow ones are filled white so the line
/// does not show through.
struct MarkerAt<C> {
    at: C,
    marker: Marker,
    colour: RGBColor,
}

fn marker_at<C>(at: C, marker: Marker, colour: RGBColor) -> MarkerAt<C> {
    MarkerAt { at, marker, colour }
}

impl<'a, C> PointCollection<'a, C> for &'a MarkerAt<C> {
    type Point = &'a C;
    type IntoIter = std::iter::Once<&'a C>;

    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.at)
    }
}

impl<C, DB: DrawingBackend> Drawable<DB> for MarkerAt<C> {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        mut pos: I,
        backend: &mut DB,
        _parent: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let Some((x, y)) = pos.next() else {
            return Ok(());
        };
        let outline: &[(i32, i32)] = match self.marker {
            Marker::Circle | Marker::HollowCircle => &[],
            Marker::Square | Marker::HollowSquare => &[(-4, -4), (4, -4), (4, 4), (-4, 4)],
            Marker::Triangle | Marker::HollowTriangle => &[(0, -5), (5, 4), (-5, 4)],
            Marker::Diamond | Marker::HollowDiamond => &[(0, -6), (6, 0), (0, 6), (-6, 0)],
        };
        let hollow = matches!(
            self.marker,
            Marker::HollowCircle
                | Marker::HollowSquare
                | Marker::HollowTriangle
                | Marker::HollowDiamond
        );
        let fill = if hollow { WHITE } else { self.colour }.filled();
        let ring = self.colour.stroke_width(2);
        let at = |&(dx, dy): &(i32, i32)| (x + dx, y + dy);
        if outline.is_empty() {
            backend.draw_circle((x, y), 4, &fill, true)?;
            if hollow {
                backend.draw_circle((x, y), 4, &ring, false)?;
            }
        } else {
            backend.fill_polygon(outline.iter().map(at), &fill)?;
            if hollow {
                let closed = outline.iter().chain(outline.first()).map(at);
                backend.draw_path(closed, &ring)?;
            }
        }
        Ok(())
    }
}

/// The x axis spans the measured levels with a little room on each side, so no marker sits on
/// an axis; one level alone is centred.
fn x_range(series: &[Series]) -> (u32, u32) {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let lo = xs.clone().min().unwrap_or(0);
    let hi = xs.max().unwrap_or(0);
    let pad = match hi - lo {
        0 => (lo / 2).max(1),
        span => (span / 25).max(1),
    };
    (lo.saturating_sub(pad), hi.saturating_add(pad))
}

/// The y axis: from 0 to a round top a little above the highest value, and the tick step, one
/// of 1, 2 or 5 × 10ⁿ giving 4 to 8 intervals, the lowest such top winning (`plotters` then
/// picks that step for that many labels).
fn y_axis(series: &[Series]) -> (f64, f64) {
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    if max <= 0.0 {
        return (1.0, 0.2);
    }
    let want = max * 1.04;
    let magnitude = 10f64.powf(want.log10().floor());
    let candidates = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0].map(|m| m * magnitude);
    candidates
        .into_iter()
        .map(|step| ((want / step).ceil(), step))
        .filter(|&(intervals, _)| (4.0..=8.0).contains(&intervals))
        .map(|(intervals, step)| (intervals * step, step))
        .min_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)))
        .unwrap_or((magnitude * 10.0, magnitude * 2.0))
}

/// `12500.4` → `12,500` (the digits grouped as the bench tables do).
fn thousands(v: f64) -> String {
    let sign = if v.round() < 0.0 { "-" } else { "" };
    format!("{sign}{}", super::report::thousands(v.abs().round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, points: &[(u32, f64)]) -> Series {
        Series {
            name: name.to_string(),
            points: points.to_vec(),
        }
    }

    fn shootout() -> Vec<Series> {
        let names = ["quill", "haproxy-tcp", "nginx-stream", "pen", "direct"];
        names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let points = (1..=10)
                    .map(|c| {
                        (
                            c * 100,
                            30_000.0 + (i as f64) * 4_000.0 - f64::from(c) * 900.0,
                        )
                    })
                    .collect::<Vec<_>>();
                series(name, &points)
            })
            .collect()
    }

    /// Checks that every tag opened is closed in order: enough to know a viewer will parse it.
    fn assert_balanced(svg: &str) {
        let mut stack = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unclosed <") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
                continue;
            }
            let name = tag.split_whitespace().next().unwrap_or("");
            match name.strip_prefix('/') {
                Some(closing) => assert_eq!(stack.pop(), Some(closing), "misnested </{closing}>"),
                None => stack.push(name),
            }
        }
        assert!(stack.is_empty(), "left open: {stack:?}");
    }

    #[test]
    fn renders_title_axes_legend_and_one_line_per_series() {
        let data = shootout();
        let svg = render_svg(
            "Quill & friends <shootout>",
            "concurrent connections",
            "requests per second",
            &data,
        )
        .unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.contains(r#"width="900" height="560""#));
        assert_balanced(&svg);
        assert!(svg.contains("<title>Quill &amp; friends &lt;shootout&gt;</title>"));
        assert!(svg.contains(">\nQuill &amp; friends &lt;shootout&gt;\n</text>"));
        assert!(svg.contains("concurrent connections"));
        assert!(svg.contains("requests per second"));
        assert!(svg.contains(">\n30,000\n</text>"), "thousands separators");
        assert!(svg.contains(">\n1,000\n</text>"), "thousands separators");
        for s in &data {
            assert!(
                svg.contains(&format!(">\n{}\n</text>", s.name)),
                "{}",
                s.name
            );
        }
        // Each series: its line in the plot and its sample in the legend, both 2 px wide in the
        // series' colour.
        for (i, _) in data.iter().enumerate() {
            let (c, _) = look(i);
            let stroke = format!(r##"stroke="#{:02X}{:02X}{:02X}""##, c.0, c.1, c.2);
            let lines = svg
                .lines()
                .filter(|l| l.starts_with("<polyline") && l.contains(&stroke))
                .filter(|l| l.contains(r#"stroke-width="2""#) && l.matches(',').count() == 10)
                .count();
            assert_eq!(lines, 1, "series {i}: one data line");
        }
    }

    #[test]
    fn every_series_looks_different() {
        let looks: std::collections::HashSet<(u8, u8, u8, usize)> = (0..64)
            .map(|i| {
                let (c, m) = look(i);
                (c.0, c.1, c.2, m as usize)
            })
            .collect();
        assert_eq!(looks.len(), 64);
    }

    #[test]
    fn edge_cases() {
        let draw = |s: &[Series]| render_svg("t", "x", "y", s);
        assert!(draw(&[]).unwrap_err().contains("no series"));
        assert!(draw(&[series("a", &[])])
            .unwrap_err()
            .contains("'a': it has no points"));
        assert!(draw(&[series(" ", &[(1, 1.0)])])
            .unwrap_err()
            .contains("without a name"));
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let err = draw(&[series("b", &[(1, 1.0), (7, bad)])]).unwrap_err();
            assert!(
                err.contains("'b'") && err.contains("concurrency 7"),
                "{err}"
            );
        }
        // One point, all zeros, tiny values, huge values, extreme and unsorted levels: drawn.
        for points in [
            vec![(500, 1234.0)],
            vec![(1, 0.0), (2, 0.0)],
            vec![(0, 0.5), (3, 0.25)],
            vec![(u32::MAX, 1e15), (0, 1e-9)],
            vec![(300, 5.0), (100, 9.0), (200, 1.0)],
        ] {
            let svg = draw(&[series("s", &points)]).unwrap();
            assert_balanced(&svg);
        }
        let svg = render_svg("a\u{0}b\nc", "x", "y", &[series("s", &[(1, 1.0)])]).unwrap();
        assert!(svg.contains("a b c") && !svg.contains('\u{0}'));
        let many: Vec<Series> = (0..20)
            .map(|i| series(&format!("target-{i}"), &[(1, 1.0), (2, f64::from(i))]))
            .collect();
        assert_balanced(&draw(&many).unwrap());
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(12_500.6), "12,501");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(-4_000.0), "-4,000");
        assert_eq!(thousands(-0.2), "0");
    }

    #[test]
    fn y_axis_is_round() {
        let one = |v: f64| y_axis(&[series("s", &[(1, v)])]);
        assert_eq!(one(45_200.0), (50_000.0, 10_000.0));
        assert_eq!(one(12_300.0), (14_000.0, 2_000.0));
        assert_eq!(one(1_000.0), (1_200.0, 200.0));
        assert_eq!(one(0.0), (1.0, 0.2));
        let (top, step) = one(3.3);
        assert!((top - 3.5).abs() < 1e-9 && (step - 0.5).abs() < 1e-9);
        for v in [1e-9, 0.7, 7.0, 999.0, 1e15] {
            let (top, step) = one(v);
            assert!(
                top >= v && top / step <= 9.0 && top / step >= 3.0,
                "{v}: {top} {step}"
            );
        }
    }

    /// Writes sample charts to look at when asked:
    /// `QUILL_CHART_DIR=/tmp/charts cargo test --lib example_charts`.
    #[test]
    fn example_charts() {
        let Some(dir) = std::env::var_os("QUILL_CHART_DIR") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        let samples = [
            ("shootout", shootout()),
            ("one-point", vec![series("quill", &[(500, 23_456.0)])]),
            ("small", vec![series("a", &[(1, 0.5), (2, 3.25), (3, 1.0)])]),
            (
                "many",
                (0..12)
                    .map(|i| {
                        let name = format!("target-with-a-long-name-{i}");
                        series(
                            &name,
                            &[(50, 1e3 * f64::from(i)), (120, 2e3 * f64::from(i))],
                        )
                    })
                    .collect(),
            ),
        ];
        for (name, data) in samples {
            let svg = render_svg(
                "Requests per second by concurrency (5,000 idle connections held)",
                "concurrent connections",
                "requests per second",
                &data,
            )
            .unwrap();
            std::fs::write(dir.join(format!("{name}.svg")), svg).unwrap();
        }
    }
}
