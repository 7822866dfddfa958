//! SVG plots of scale runs (plotters, SVG backend only): the propagation-latency CDF of one run,
//! and p99 propagation and bytes per change across runs.

use plotters::prelude::*;
use std::path::Path;

const SIZE: (u32, u32) = (860, 480);

/// One CDF line per series of latencies (ms), x logarithmic.
pub fn cdf(path: &Path, title: &str, series: &[(String, Vec<f64>)]) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1f64..max * 1.2).log_scale(), 0f64..1.0)?;
    chart
        .configure_mesh()
        .x_desc("ms from the change to the stream holding it")
        .y_desc("fraction of (change, stream)")
        .draw()?;
    for (i, (name, values)) in series.iter().enumerate() {
        let mut v: Vec<f64> = values.iter().map(|x| x.max(1.0)).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len().max(1) as f64;
        let pts: Vec<(f64, f64)> = v
            .iter()
            .enumerate()
            .map(|(k, x)| (*x, (k + 1) as f64 / n))
            .collect();
        let c = Palette99::pick(i);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], Palette99::pick(i)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
