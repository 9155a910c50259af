//! SVG plots of bench results, drawn with plotters (its SVG backend and
//! built-in text, so no system fonts are needed).

use std::path::Path;

use plotters::prelude::*;

use super::record::RunResult;

const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
    RGBColor(255, 215, 0),
];

fn label(prefix: &str, r: &RunResult) -> String {
    let store = if r.store.is_empty() {
        prefix.to_string()
    } else {
        r.store.clone()
    };
    format!("{store} {} c{}", r.workload, r.clients)
        .trim()
        .to_string()
}

/// Runs of one store and workload: (label, [(throughput, p99, clients)]).
type Group = (String, Vec<(f64, f64, usize)>);

/// A chart's frame: its caption, margin and axis label areas.
pub(super) fn frame<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, plotters::coord::Shift>,
    caption: String,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    builder
}

/// The series labels, upper left on a light box.
pub(super) fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

pub(super) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Latency (log scale) against percentile, one line per run.
pub fn latency_cdf(path: &Path, title: &str, runs: &[(&str, &RunResult)]) -> anyhow::Result<()> {
    let max = runs
        .iter()
        .flat_map(|(_, r)| r.cdf.iter().map(|(_, ms)| *ms))
        .fold(1.0f64, f64::max);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = frame(&root, format!("{title}: latency by percentile"))
        .build_cartesian_2d(0f64..100f64, (0.01f64..max * 1.2).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms, log)")
        .draw()?;
    for (i, (prefix, r)) in runs.iter().enumerate() {
        let mut points: Vec<(f64, f64)> = r.cdf.iter().map(|(p, ms)| (*p, ms.max(0.01))).collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let c = color(i);
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))?
            .label(label(prefix, r))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    legend(&mut chart)?;
    root.present()?;
    Ok(())
}

/// p99 latency against throughput: one point per run, runs of the same
/// store and workload joined in client-count order.
pub fn latency_vs_throughput(
    path: &Path,
    title: &str,
    runs: &[(&str, &RunResult)],
) -> anyhow::Result<()> {
    let max_x = runs
        .iter()
        .map(|(_, r)| r.throughput)
        .fold(1.0f64, f64::max);
    let max_y = runs.iter().map(|(_, r)| r.p99_ms).fold(1.0f64, f64::max);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = frame(&root, format!("{title}: p99 latency vs throughput"))
        .build_cartesian_2d(0f64..max_x * 1.1, 0f64..max_y * 1.2)?;
    chart
        .configure_mesh()
        .x_desc("requests per second")
        .y_desc("p99 latency (ms)")
        .draw()?;
    let mut groups: Vec<Group> = Vec::new();
    for (prefix, r) in runs {
        let key = label(prefix, r)
            .rsplit_once(' ')
            .map_or(String::new(), |(k, _)| k.to_string());
        let point = (r.throughput, r.p99_ms, r.clients);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, pts)) => pts.push(point),
            None => groups.push((key, vec![point])),
        }
    }
    for (i, (key, mut pts)) in groups.into_iter().enumerate() {
        pts.sort_by_key(|p| p.2);
        let c = color(i);
        let line: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.1)).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))?
            .label(key)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart.draw_series(line.into_iter().map(|p| Circle::new(p, 4, c.filled())))?;
    }
    legend(&mut chart)?;
    root.present()?;
    Ok(())
}
