//! The page: SVG charts drawn with plotters (SVG backend, text left to the
//! browser), laid out by a minijinja template compiled into the binary.
//! Nothing on the page loads anything: no script, no font, no image file;
//! a Content-Security-Policy forbids it as well.

use std::collections::BTreeMap;

use minijinja::{context, Environment, Value};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use refscore_core::Error;

use crate::model::{MetricReport, Report};
use refscore_stats::agreement::ReliabilityBin;

const TEMPLATE: &str = include_str!("../templates/report.html");
const BLUE: RGBColor = RGBColor(0x1f, 0x6f, 0xb5);
const ORANGE: RGBColor = RGBColor(0xe0, 0x7b, 0x00);
const RED_: RGBColor = RGBColor(0xc0, 0x1c, 0x28);
const GREEN_: RGBColor = RGBColor(0x26, 0x8a, 0x3e);
const GREY: RGBColor = RGBColor(0x77, 0x77, 0x77);

fn chart_err<E: std::fmt::Display>(e: E) -> Error {
    Error::internal(format!("drawing a chart: {e}"))
}

/// A metric's histogram: the result's bars, the baseline's outline, the
/// threshold as a dashed line.
fn histogram(m: &MetricReport) -> Result<String, Error> {
    let h = &m.result.histogram;
    let n = h.counts.len().max(1);
    let width = (h.hi - h.lo) / n as f64;
    let total = |c: &[u64]| c.iter().sum::<u64>().max(1) as f64;
    let share = |c: &[u64]| -> Vec<f64> {
        let t = total(c);
        c.iter().map(|x| *x as f64 / t).collect()
    };
    let cur = share(&h.counts);
    let base = m.baseline.as_ref().map(|b| share(&b.histogram.counts));
    let ymax = cur
        .iter()
        .chain(base.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b))
        .max(0.01)
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (440, 230)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .caption(&m.name, ("sans-serif", 15))
            .x_label_area_size(28)
            .y_label_area_size(44)
            .build_cartesian_2d(h.lo..h.hi, 0.0..ymax)
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(6)
            .y_labels(5)
            .y_desc("share of rows")
            .x_label_formatter(&|v| format!("{v:.2}"))
            .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
            .draw()
            .map_err(chart_err)?;
        chart
            .draw_series(cur.iter().enumerate().map(|(i, c)| {
                let x0 = h.lo + i as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width, *c)], BLUE.mix(0.55).filled())
            }))
            .map_err(chart_err)?
            .label("result")
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], BLUE.mix(0.55).filled())
            });
        if let Some(base) = &base {
            chart
                .draw_series(base.iter().enumerate().map(|(i, c)| {
                    let x0 = h.lo + i as f64 * width;
                    Rectangle::new([(x0, 0.0), (x0 + width, *c)], ORANGE.stroke_width(2))
                }))
                .map_err(chart_err)?
                .label("baseline")
                .legend(|(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], ORANGE.stroke_width(2))
                });
        }
        if let Some(t) = m.threshold.filter(|t| *t >= h.lo && *t <= h.hi) {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(t, 0.0), (t, ymax)],
                    5,
                    4,
                    RED_.stroke_width(2),
                ))
                .map_err(chart_err)?
                .label(format!("threshold {t}"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], RED_.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(GREY)
            .draw()
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(svg)
}

/// Mean differences with their intervals, one row per label, zero marked.
fn forest(title: &str, rows: &[(String, f64, f64, f64)]) -> Result<String, Error> {
    let lo = rows.iter().map(|r| r.2).fold(0.0f64, f64::min);
    let hi = rows.iter().map(|r| r.3).fold(0.0f64, f64::max);
    let pad = ((hi - lo) * 0.08).max(1e-3);
    let (lo, hi) = (lo - pad, hi + pad);
    let height = 70 + 26 * rows.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, height)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .caption(title, ("sans-serif", 15))
            .x_label_area_size(28)
            .y_label_area_size(150)
            .build_cartesian_2d(lo..hi, (0..rows.len()).into_segmented())
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_labels(7)
            .y_labels(rows.len().max(1))
            .x_desc("mean difference (result − baseline), 95% interval")
            .x_label_formatter(&|v| format!("{v:+.3}"))
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(chart_err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, SegmentValue::Exact(0)), (0.0, SegmentValue::Last)],
                GREY.stroke_width(1),
            )))
            .map_err(chart_err)?;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                let color = if r.3 < 0.0 {
                    RED_
                } else if r.2 > 0.0 {
                    GREEN_
                } else {
                    GREY
                };
                ErrorBar::new_horizontal(
                    SegmentValue::CenterOf(i),
                    r.2,
                    r.1,
                    r.3,
                    color.filled().stroke_width(2),
                    8,
                )
            }))
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(svg)
}

fn num(v: Value, digits: Option<usize>) -> String {
    match f64::try_from(v.clone()) {
        Ok(x) if !v.is_none() && !v.is_undefined() => {
            let d = digits.unwrap_or(3);
            if x.fract() == 0.0 && x.abs() < 1e15 && digits.is_none() {
                format!("{x:.0}")
            } else {
                format!("{x:.d$}")
            }
        }
        _ => "—".into(),
    }
}

fn pct(v: Value) -> String {
    match f64::try_from(v.clone()) {
        Ok(x) if !v.is_none() && !v.is_undefined() => format!("{:.1}%", x * 100.0),
        _ => "—".into(),
    }
}

fn sgn(v: Value, digits: Option<usize>) -> String {
    match f64::try_from(v.clone()) {
        Ok(x) if !v.is_none() && !v.is_undefined() => crate::signed(x, digits.unwrap_or(3)),
        _ => "—".into(),
    }
}

/// A reliability diagram: per tenth of P(true), the share the labels call
/// true against the mean P(true), beside the diagonal of perfect calibration.
fn reliability(metric: &str, bins: &[ReliabilityBin]) -> Result<String, Error> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (360, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .caption(format!("{metric}: reliability"), ("sans-serif", 15))
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0.0..1.0, 0.0..1.0)
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .x_labels(6)
            .y_labels(6)
            .x_desc("mean P(true)")
            .y_desc("share labelled true")
            .x_label_formatter(&|v| format!("{v:.1}"))
            .y_label_formatter(&|v| format!("{v:.1}"))
            .draw()
            .map_err(chart_err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, 0.0), (1.0, 1.0)],
                GREY.stroke_width(1),
            )))
            .map_err(chart_err)?;
        let points: Vec<(f64, f64)> = bins
            .iter()
            .map(|b| (b.mean_probability, b.share_true))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))
            .map_err(chart_err)?;
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 4, BLUE.filled())))
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(svg)
}

fn count(v: Value) -> String {
    match u64::try_from(v) {
        Ok(n) => {
            let s = n.to_string();
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i) % 3 == 0 {
                    out.push(',');
                }
                out.push(c);
            }
            out
        }
        Err(_) => "—".into(),
    }
}

/// Most slices drawn in a slice chart (the table lists them all).
const SLICES_CHARTED: usize = 15;

pub(crate) fn page(report: &Report) -> Result<String, Error> {
    let mut charts: BTreeMap<String, Value> = BTreeMap::new();
    for m in &report.metrics {
        charts.insert(
            format!("hist-{}", m.name),
            Value::from_safe_string(histogram(m)?),
        );
    }
    for c in &report.calibration {
        if let Some(p) = &c.figures.probability_calibration {
            charts.insert(
                format!("reliability-{}", c.figures.metric),
                Value::from_safe_string(reliability(&c.figures.metric, &p.reliability)?),
            );
        }
    }
    if report.baseline.is_some() {
        let rows: Vec<(String, f64, f64, f64)> = report
            .metrics
            .iter()
            .filter_map(|m| {
                let c = m.change.as_ref()?;
                Some((m.name.clone(), c.diff?, c.ci_low?, c.ci_high?))
            })
            .collect();
        if !rows.is_empty() {
            charts.insert(
                "forest".into(),
                Value::from_safe_string(forest("change per metric", &rows)?),
            );
        }
        if let Some(s) = &report.slices {
            for sm in &s.metrics {
                let rows: Vec<(String, f64, f64, f64)> = sm
                    .slices
                    .iter()
                    .filter_map(|r| {
                        let c = r.change.as_ref()?;
                        Some((r.slice.clone(), c.diff?, c.ci_low?, c.ci_high?))
                    })
                    .take(SLICES_CHARTED)
                    .collect();
                if !rows.is_empty() {
                    charts.insert(
                        format!("slices-{}", sm.name),
                        Value::from_safe_string(forest(
                            &format!("{} by {}", sm.name, s.column),
                            &rows,
                        )?),
                    );
                }
            }
        }
    }
    let mut env = Environment::new();
    env.add_filter("num", num);
    env.add_filter("pct", pct);
    env.add_filter("sgn", sgn);
    env.add_filter("count", count);
    env.add_template("report.html", TEMPLATE)
        .map_err(|e| Error::internal(format!("report template: {e}")))?;
    let tmpl = env.get_template("report.html").expect("added");
    tmpl.render(context! {
        r => Value::from_serialize(report),
        charts => charts,
    })
    .map_err(|e| Error::internal(format!("report template: {e:#}")))
}
