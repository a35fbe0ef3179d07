//! The `+stats-plot FILE` picture: every PE's utilisation over the job as
//! one SVG 1.1 file a browser shows. One row per PE (labelled on the
//! left), time across; each column a stacked bar of the PE's busy
//! (green), overhead (amber) and idle (grey) share of it, white where the
//! PE had not started or had ended. A time axis, a legend and a title
//! with the job's length and PE count.
//!
//! # Columns
//!
//! PEs keep buckets of their own widths (`stats`), in Unix nanoseconds.
//! The plot cuts the job's span (first PE start to last PE end) into
//! [`COLUMNS`] equal columns and spreads each bucket's busy and idle time
//! over the columns it overlaps, in proportion to the overlap: every
//! row uses the same columns, so rows line up across PEs and processes.
//! Overhead is what is left of the time the PE was alive in the column.
//!
//! The file is plain text with every name escaped; it is written beside
//! the target and renamed, as the timeline is (`chrome`).
use std::fmt::Write as _;
use std::path::Path;

use super::part::ProcessPart;
use super::report::human;
use super::stats::PeStats;

/// Columns across the plot.
pub(crate) const COLUMNS: usize = 200;

const LEFT: f64 = 70.0;
const TOP: f64 = 50.0;
const COL_W: f64 = 4.0;
const ROW_H: f64 = 18.0;
const GAP: f64 = 4.0;

const BUSY: &str = "#2e9e44";
const OVERHEAD: &str = "#f0a830";
const IDLE: &str = "#c8c8c8";

/// Writes the plot of `parts` to `path`; returns a one-line summary.
pub(crate) fn write_plot(path: &Path, parts: &[ProcessPart]) -> Result<String, String> {
    let (svg, summary) = render(parts);
    super::write_whole(path, svg.as_bytes())
        .map_err(|e| format!("cannot write the stats plot to {}: {e}", path.display()))?;
    Ok(summary)
}

/// A PE's row: busy, idle and alive nanoseconds per column.
fn resample(s: &PeStats, t0: u64, col_ns: f64) -> Vec<[f64; 3]> {
    let mut cols = vec![[0.0f64; 3]; COLUMNS];
    // Spreads `amount` over `[a, b)` (ns since t0) into class `k`.
    let mut spread = |k: usize, a: f64, b: f64, amount: f64| {
        if b <= a || amount <= 0.0 {
            return;
        }
        let per_ns = amount / (b - a);
        let first = ((a / col_ns).floor().max(0.0) as usize).min(COLUMNS - 1);
        let last = (((b / col_ns).ceil() as usize).max(first + 1)).min(COLUMNS);
        for (c, col) in cols.iter_mut().enumerate().take(last).skip(first) {
            let (ca, cb) = (c as f64 * col_ns, (c + 1) as f64 * col_ns);
            let overlap = b.min(cb) - a.max(ca);
            if overlap > 0.0 {
                col[k] += overlap * per_ns;
            }
        }
    };
    let rel = |t: u64| t as f64 - t0 as f64;
    for (i, (&busy, &idle)) in s.busy.iter().zip(&s.idle).enumerate() {
        // The bucket's time, within the PE's life (the first and last
        // buckets are partly before and after it).
        let a = rel(s.origin_ns + i as u64 * s.bucket_ns).max(rel(s.start_ns));
        let b = rel(s.origin_ns + (i as u64 + 1) * s.bucket_ns).min(rel(s.end_ns));
        let (a, b) = if b > a { (a, b) } else { (b, b + 1.0) };
        spread(0, a, b, busy as f64);
        spread(1, a, b, idle as f64);
    }
    spread(
        2,
        rel(s.start_ns),
        rel(s.end_ns),
        (s.end_ns - s.start_ns) as f64,
    );
    cols
}

fn render(parts: &[ProcessPart]) -> (String, String) {
    let mut pes: Vec<(u32, Option<&PeStats>)> = parts
        .iter()
        .flat_map(|p| &p.pes)
        .map(|pe| (pe.pe, pe.stats.as_ref()))
        .collect();
    pes.sort_by_key(|p| p.0);
    let with = pes.iter().filter_map(|p| p.1);
    let t0 = with.clone().map(|s| s.start_ns).min().unwrap_or(0);
    let t1 = with.map(|s| s.end_ns).max().unwrap_or(0).max(t0 + 1);
    let span = t1 - t0;
    let col_ns = span as f64 / COLUMNS as f64;
    let plot_w = COLUMNS as f64 * COL_W;
    let width = LEFT + plot_w + 40.0; // room for the last tick label, centred on the right edge
    let rows_h = pes.len() as f64 * (ROW_H + GAP);
    let height = TOP + rows_h + 60.0;
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    let title = format!(
        "Utilisation of {} PEs over {} (converse +stats)",
        pes.len(),
        human(span)
    );
    let _ = writeln!(out, "<title>{}</title>", escape(&title));
    let _ = writeln!(
        out,
        "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"white\"/>"
    );
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        escape(&title)
    );
    // Legend.
    for (i, (colour, name)) in [(BUSY, "busy"), (OVERHEAD, "overhead"), (IDLE, "idle")]
        .iter()
        .enumerate()
    {
        let x = LEFT + i as f64 * 100.0;
        let _ = writeln!(
            out,
            "<rect x=\"{x}\" y=\"28\" width=\"10\" height=\"10\" fill=\"{colour}\"/><text x=\"{}\" y=\"37\">{name}</text>",
            x + 14.0
        );
    }
    for (row, (pe, stats)) in pes.iter().enumerate() {
        let y = TOP + row as f64 * (ROW_H + GAP);
        let _ = writeln!(out, "<g class=\"pe\" id=\"pe-{pe}\">");
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">PE {pe}</text>",
            LEFT - 6.0,
            y + ROW_H - 5.0
        );
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{y}\" width=\"{plot_w}\" height=\"{ROW_H}\" fill=\"white\" stroke=\"#888\" stroke-width=\"0.5\"/>"
        );
        match stats {
            Some(s) => {
                let wall = s.wall_ns().max(1) as f64;
                let _ = writeln!(
                    out,
                    "<title>PE {pe}: busy {:.1} %, idle {:.1} %, overhead {:.1} %</title>",
                    s.busy_ns as f64 * 100.0 / wall,
                    s.idle_ns as f64 * 100.0 / wall,
                    s.overhead_ns() as f64 * 100.0 / wall
                );
                for (c, [busy, idle, alive]) in resample(s, t0, col_ns).into_iter().enumerate() {
                    let x = LEFT + c as f64 * COL_W;
                    let frac = |v: f64| (v / col_ns).clamp(0.0, 1.0);
                    let (b, i, a) = (frac(busy), frac(idle), frac(alive));
                    let o = (a - b - i).max(0.0);
                    // Stacked from the bottom: busy, overhead, idle.
                    let mut bottom = y + ROW_H;
                    for (share, colour) in [(b, BUSY), (o, OVERHEAD), (i, IDLE)] {
                        let h = share * ROW_H;
                        if h >= 0.05 {
                            bottom -= h;
                            let _ = writeln!(
                                out,
                                "<rect x=\"{x}\" y=\"{bottom:.2}\" width=\"{COL_W}\" height=\"{h:.2}\" fill=\"{colour}\"/>"
                            );
                        }
                    }
                }
            }
            None => {
                let _ = writeln!(
                    out,
                    "<text x=\"{}\" y=\"{}\" fill=\"#a00\">no stats: the PE had not ended</text>",
                    LEFT + 6.0,
                    y + ROW_H - 5.0
                );
            }
        }
        out.push_str("</g>\n");
    }
    // The time axis: five ticks.
    let axis_y = TOP + rows_h + 4.0;
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{axis_y}\" x2=\"{}\" y2=\"{axis_y}\" stroke=\"black\"/>",
        LEFT + plot_w
    );
    for k in 0..=4 {
        let x = LEFT + plot_w * k as f64 / 4.0;
        let label = human(span * k / 4);
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{axis_y}\" x2=\"{x}\" y2=\"{}\" stroke=\"black\"/><text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            axis_y + 5.0,
            axis_y + 18.0,
            escape(&label)
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time since the first PE started</text>",
        LEFT + plot_w / 2.0,
        axis_y + 36.0
    );
    out.push_str("</svg>\n");
    let summary = format!(
        "{} PEs, {COLUMNS} columns of {} each",
        pes.len(),
        human(col_ns.round() as u64)
    );
    (out, summary)
}

/// `s` as XML text.
fn escape(s: &str) -> String {
    let mut e = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => e.push_str("&lt;"),
            '>' => e.push_str("&gt;"),
            '&' => e.push_str("&amp;"),
            '"' => e.push_str("&quot;"),
            '\'' => e.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' => e.push(' '),
            c => e.push(c),
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::super::part::PePart;
    use super::*;

    #[test]
    fn rows_line_up_on_common_columns() {
        // PE 0 busy for its whole life (0..2000 ns of the job), PE 1 idle,
        // starting halfway: buckets of 500 ns each from 0.
        let pe0 = PeStats {
            start_ns: 10_000,
            end_ns: 12_000,
            busy_ns: 2000,
            origin_ns: 10_000,
            bucket_ns: 500,
            busy: vec![500; 4],
            idle: vec![0; 4],
            ..PeStats::default()
        };
        let pe1 = PeStats {
            start_ns: 11_000,
            end_ns: 12_000,
            idle_ns: 1000,
            origin_ns: 10_000,
            bucket_ns: 500,
            busy: vec![0; 4],
            idle: vec![0, 0, 500, 500],
            ..PeStats::default()
        };
        let col = 2000.0 / COLUMNS as f64;
        let r0 = resample(&pe0, 10_000, col);
        let r1 = resample(&pe1, 10_000, col);
        for c in 0..COLUMNS {
            assert!((r0[c][0] - col).abs() < 1e-6, "PE 0 busy in column {c}");
            assert!((r0[c][2] - col).abs() < 1e-6);
            let alive = if c < COLUMNS / 2 { 0.0 } else { col };
            assert!((r1[c][1] - alive).abs() < 1e-6, "PE 1 idle in column {c}");
            assert!((r1[c][2] - alive).abs() < 1e-6);
        }
    }

    #[test]
    fn the_svg_has_a_row_per_pe_and_escapes_names() {
        let part = ProcessPart {
            pes: (0..3)
                .map(|pe| PePart {
                    pe,
                    stats: (pe != 2).then(|| PeStats {
                        start_ns: 0,
                        end_ns: 1_000_000,
                        busy_ns: 1000,
                        bucket_ns: 1 << 20,
                        busy: vec![1000],
                        idle: vec![0],
                        ..PeStats::default()
                    }),
                    ..PePart::default()
                })
                .collect(),
            ..ProcessPart::default()
        };
        let (svg, summary) = render(&[part]);
        assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<g class=\"pe\"").count(), 3);
        assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
        assert!(svg.contains(">PE 2</text>") && svg.contains("no stats"));
        assert!(summary.starts_with("3 PEs"), "{summary}");
        assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
    }
}
