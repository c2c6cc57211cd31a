//! Draws a [`Timeline`] as SVG: completions per second (upper panel) and latency p50/p99
//! on a log scale (lower panel) over one time axis, each fault shaded across both panels
//! in its family's colour and named at the top. Text is SVG `<text>` laid out by
//! plotters' built-in estimate, so no font library is needed. Pure: returns the document.

use std::collections::BTreeMap;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::legend::{Legend, Swatch};
use super::{draw_error, PlotError, FONT};
use crate::nemesis_log::FaultInterval;
use crate::timeline::{Completions, Operation, Timeline};

/// Width and height of the picture, in pixels.
pub const SIZE: (u32, u32) = (1400, 900);

/// Room right of each panel for its legend.
const LEGEND_WIDTH: u32 = 190;
const FAULT_OPACITY: f64 = 0.18;
const DASH: (u32, u32) = (5, 3);
const NS_PER_MS: f64 = 1e6;
const NS_PER_S: f64 = 1e9;

/// The SVG document of `timeline`, headed by `title`.
pub fn render(timeline: &Timeline, title: &str) -> Result<String, PlotError> {
    let mut document = String::new();
    {
        let root = SVGBackend::with_string(&mut document, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let heading = format!(
            "{title}: completions and latency over time ({} buckets), faults shaded",
            bucket_label(timeline.bucket_ns)
        );
        let body = root.titled(&heading, (FONT, 22)).map_err(draw_error)?;
        let (upper, lower) = body.split_vertically(SIZE.1 / 2 - 20);
        draw_throughput(&upper, timeline)?;
        draw_latency(&lower, timeline)?;
        root.present().map_err(draw_error)?;
    }
    Ok(document)
}

fn draw_throughput<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    timeline: &Timeline,
) -> Result<(), PlotError> {
    let rates = |op: Operation, pick: fn(&Completions) -> u32| -> Vec<f64> {
        timeline.completions[&op]
            .iter()
            .map(|counts| timeline.per_second(pick(counts)))
            .collect()
    };
    let series: Vec<(Operation, Vec<f64>, Vec<f64>)> = Operation::ALL
        .into_iter()
        .map(|op| (op, rates(op, |c| c.ok), rates(op, Completions::not_ok)))
        .collect();
    let top = series
        .iter()
        .flat_map(|(_, ok, not_ok)| ok.iter().chain(not_ok))
        .fold(1.0_f64, |top, &rate| top.max(rate))
        * 1.12;

    let (plot_area, legend_area) = beside_legend(area);
    let mut chart = panel(&plot_area, timeline, 0.0..top, "completions / s")?;
    let mut legend = Legend::default();
    shade_faults(&mut chart, &timeline.faults, (0.0, top), Some(&mut legend))?;
    label_faults(&mut chart, &timeline.faults, top, timeline.span_s())?;

    for (op, ok, not_ok) in &series {
        let colour = operation_colour(*op);
        let solid = colour.stroke_width(2);
        let every = |rates: &[f64]| segments(timeline, rates.iter().map(|&rate| Some(rate)));
        draw_line(&mut chart, every(ok), Swatch::Line(solid))?;
        legend.add(format!("{} ok", op.f()), Swatch::Line(solid));
        if not_ok.iter().any(|&rate| rate > 0.0) {
            let dashed = Swatch::Dashed(colour.stroke_width(1));
            draw_line(&mut chart, every(not_ok), dashed)?;
            legend.add(format!("{} fail/info", op.f()), dashed);
        }
    }
    if series
        .iter()
        .all(|(_, _, not_ok)| not_ok.iter().all(|&r| r == 0.0))
    {
        // Say so, rather than leave the reader wondering whether failures are drawn.
        legend.add(
            "fail/info: none",
            Swatch::Dashed(BLACK.mix(0.5).stroke_width(1)),
        );
    }
    legend.draw(&legend_area)
}

fn draw_latency<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    timeline: &Timeline,
) -> Result<(), PlotError> {
    // Log scale: a wait under 10 µs is drawn at 10 µs.
    let millis = |ns: u64| (ns as f64 / NS_PER_MS).max(0.01);
    let all: Vec<f64> = timeline
        .latency
        .values()
        .flatten()
        .flatten()
        .flat_map(|latency| [millis(latency.p50_ns), millis(latency.p99_ns)])
        .collect();
    let (low, high) = if all.is_empty() {
        (1.0, 1000.0)
    } else {
        let low = all.iter().copied().fold(f64::INFINITY, f64::min);
        let high = all.iter().copied().fold(0.0_f64, f64::max);
        (low / 2.0, high * 3.0)
    };

    let (plot_area, legend_area) = beside_legend(area);
    let mut chart = panel(
        &plot_area,
        timeline,
        (low..high).log_scale(),
        "latency, ms (log scale)",
    )?;
    let mut legend = Legend::default();
    shade_faults(&mut chart, &timeline.faults, (low, high), None)?;

    for op in Operation::TIMED {
        let Some(latency) = timeline.latency.get(&op) else {
            continue;
        };
        if latency.iter().all(Option::is_none) {
            continue;
        }
        let colour = operation_colour(op);
        let p50 = Swatch::Line(colour.stroke_width(2));
        let p99 = Swatch::Dashed(colour.stroke_width(1));
        let p50_ms = latency.iter().map(|l| l.map(|l| millis(l.p50_ns)));
        draw_line(&mut chart, segments(timeline, p50_ms), p50)?;
        legend.add(format!("{} p50", op.f()), p50);
        let p99_ms = latency.iter().map(|l| l.map(|l| millis(l.p99_ns)));
        draw_line(&mut chart, segments(timeline, p99_ms), p99)?;
        legend.add(format!("{} p99", op.f()), p99);
    }
    legend.draw(&legend_area)
}

/// The panel's chart area and, right of it, its legend's column.
fn beside_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let (width, _) = area.dim_in_pixel();
    let (chart, legend) = area.split_horizontally(width.saturating_sub(LEGEND_WIDTH));
    (chart, legend.margin(10, 0, 0, 0))
}

/// A panel with the run's time along x and `y` up, its axes labelled.
fn panel<'a, DB, Y>(
    area: &'a DrawingArea<DB, Shift>,
    timeline: &Timeline,
    y: Y,
    y_desc: &str,
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y::CoordDescType>>, PlotError>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..timeline.span_s(), y)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the run began")
        .y_desc(y_desc)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(draw_error)?;
    Ok(chart)
}

fn draw_line<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    segments: Vec<Vec<(f64, f64)>>,
    swatch: Swatch,
) -> Result<(), PlotError>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    match swatch {
        Swatch::Line(style) | Swatch::Shade(style) => chart
            .draw_series(
                segments
                    .into_iter()
                    .map(|points| PathElement::new(points, style)),
            )
            .map(drop),
        Swatch::Dashed(style) => chart
            .draw_series(
                segments
                    .into_iter()
                    .map(|points| DashedPathElement::new(points, DASH.0, DASH.1, style)),
            )
            .map(drop),
    }
    .map_err(draw_error)
}

/// One rectangle per fault from `bottom` to `top`; one legend entry per family.
fn shade_faults<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    faults: &[FaultInterval],
    (bottom, top): (f64, f64),
    mut legend: Option<&mut Legend>,
) -> Result<(), PlotError>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    let mut by_family: BTreeMap<&str, Vec<&FaultInterval>> = BTreeMap::new();
    for fault in faults {
        by_family.entry(&fault.family).or_default().push(fault);
    }
    for (family, faults) in by_family {
        let fill = family_colour(family).mix(FAULT_OPACITY).filled();
        chart
            .draw_series(faults.into_iter().map(|fault| {
                Rectangle::new(
                    [
                        (fault.start_ns as f64 / NS_PER_S, bottom),
                        (fault.end_ns as f64 / NS_PER_S, top),
                    ],
                    fill,
                )
            }))
            .map_err(draw_error)?;
        if let Some(legend) = legend.as_deref_mut() {
            legend.add(format!("fault: {family}"), Swatch::Shade(fill));
        }
    }
    Ok(())
}

/// Each fault's name, written downwards from the top of its shading; where faults are
/// too dense for that (a long soak), a name that would overprint the last is left out.
fn label_faults<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    faults: &[FaultInterval],
    top: f64,
    span_s: f64,
) -> Result<(), PlotError>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    const LABEL_PX: f64 = 16.0;
    let (width_px, _) = chart.plotting_area().dim_in_pixel();
    let min_gap_s = span_s * LABEL_PX / f64::from(width_px.max(1));
    let mut last_s = f64::NEG_INFINITY;
    let mut shown = Vec::new();
    for fault in faults {
        let start_s = fault.start_ns as f64 / NS_PER_S;
        if start_s - last_s >= min_gap_s {
            shown.push((start_s, fault.fault.as_str()));
            last_s = start_s;
        }
    }
    let ink = BLACK.mix(0.75);
    let style = TextStyle::from((FONT, 12).into_font())
        .transform(FontTransform::Rotate90)
        .color(&ink);
    chart
        .draw_series(shown.into_iter().map(|(start_s, name)| {
            EmptyElement::at((start_s, top)) + Text::new(name.to_owned(), (16, 6), style.clone())
        }))
        .map_err(draw_error)?;
    Ok(())
}

/// The runs of consecutive buckets that have a value, as points at bucket centres; a
/// bucket without one breaks the line instead of drawing it down to zero.
fn segments(
    timeline: &Timeline,
    values: impl Iterator<Item = Option<f64>>,
) -> Vec<Vec<(f64, f64)>> {
    let half = timeline.bucket_start_s(1) / 2.0;
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (bucket, value) in values.enumerate() {
        match (value, runs.last_mut()) {
            (Some(y), Some(run)) => run.push((timeline.bucket_start_s(bucket) + half, y)),
            _ => runs.push(Vec::new()),
        }
    }
    runs.into_iter()
        .filter(|run| !run.is_empty())
        .map(|run| match run.as_slice() {
            // A lone point would draw nothing: give it the bucket's width.
            [(x, y)] => vec![(x - half, *y), (x + half, *y)],
            _ => run,
        })
        .collect()
}

fn operation_colour(op: Operation) -> RGBColor {
    match op {
        Operation::Send => RGBColor(31, 119, 180),
        Operation::Txn => RGBColor(44, 160, 44),
        Operation::Poll => RGBColor(90, 90, 90),
        Operation::Transform => RGBColor(214, 39, 40),
    }
}

/// The shading of a fault family; one the picture does not know is grey.
pub fn family_colour(family: &str) -> RGBColor {
    match family {
        "kill" => RGBColor(214, 39, 40),
        "pause" => RGBColor(255, 127, 14),
        "partition" => RGBColor(148, 103, 189),
        "etcd" => RGBColor(140, 86, 75),
        _ => RGBColor(127, 127, 127),
    }
}

fn bucket_label(bucket_ns: u64) -> String {
    if (bucket_ns as f64) < NS_PER_S {
        format!("{} ms", tick(&(bucket_ns as f64 / NS_PER_MS)))
    } else {
        format!("{} s", tick(&(bucket_ns as f64 / NS_PER_S)))
    }
}

/// An axis label: at most two decimals, none when they are zeros (`10`, `2.5`, `0.05`).
fn tick(value: &f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_axis_values_when_ticked_then_trailing_zeros_are_dropped() {
        assert_eq!(tick(&10.0), "10");
        assert_eq!(tick(&2.5), "2.5");
        assert_eq!(tick(&0.05), "0.05");
        assert_eq!(tick(&0.30000000000000004), "0.3");
    }

    #[test]
    fn given_a_gap_when_segmented_then_the_line_breaks_and_a_lone_point_spans_its_bucket() {
        let timeline = Timeline::with_bucket(&[], &[], 1_000_000_000);
        let runs = segments(
            &timeline,
            [Some(1.0), Some(2.0), None, Some(3.0)].into_iter(),
        );
        assert_eq!(
            runs,
            vec![vec![(0.5, 1.0), (1.5, 2.0)], vec![(3.0, 3.0), (4.0, 3.0)]]
        );
    }
}
