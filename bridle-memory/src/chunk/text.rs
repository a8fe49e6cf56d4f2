//! Cutting text that has no syntax tree: token-sized windows of lines, and Markdown by headings.
//!
//! Windows pack whole lines up to the token budget and overlap by a few lines, so a sentence cut
//! at a window's end is read whole by the next one. Markdown is cut at ATX headings (`#` to
//! `######`, outside fenced code blocks); each section carries its heading path as context
//! (`Install > From source`), a section over the budget is windowed, and sections under the
//! minimum size are merged with the next one.

use super::{ChunkConfig, ChunkType, Lines, Span, header_line, merge_small};

/// Lines `start..end` cut into windows that fit the budget with `header` prepended.
pub(crate) fn windows(
    lines: &Lines<'_>,
    start: usize,
    end: usize,
    context: &[String],
    header: &str,
    config: &ChunkConfig,
    ty: ChunkType,
) -> Vec<Span> {
    let budget = config
        .max_tokens
        .saturating_sub(lines.overhead(header))
        .max(1);
    let mut out = Vec::new();
    let mut s = start;
    while s < end {
        // Skip leading blank lines.
        while s < end && lines.line(s).trim().is_empty() {
            s += 1;
        }
        if s >= end {
            break;
        }
        let mut e = s + 1;
        let mut used = lines.cost(s, e);
        while e < end && used + lines.cost(e, e + 1) <= budget {
            used += lines.cost(e, e + 1);
            e += 1;
        }
        out.push(Span {
            start: s,
            end: e,
            ty,
            context: context.to_vec(),
            header: header.to_string(),
        });
        if e >= end {
            break;
        }
        // Overlap, but always move forward.
        let back = config.overlap_lines.min((e - s).saturating_sub(1));
        s = e - back;
        if lines.blank(e, end) {
            break;
        }
    }
    // Windows of a part overlap; everything else in this crate does not. Keep the overlap only
    // for windowed files (`Window`); a long item's parts must not share lines.
    if ty != ChunkType::Window {
        for i in 1..out.len() {
            let prev_end = out[i - 1].end;
            if out[i].start < prev_end {
                out[i].start = prev_end;
            }
        }
        out.retain(|s| s.start < s.end && !lines.blank(s.start, s.end));
    }
    out
}

/// A heading line's level and title, if it is one.
fn heading(line: &str) -> Option<(usize, &str)> {
    let t = line.trim_start();
    if line.len() - t.len() > 3 {
        return None;
    }
    let level = t.bytes().take_while(|b| *b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &t[level..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    Some((level, rest.trim().trim_end_matches('#').trim()))
}

/// Markdown cut by headings.
pub(crate) fn markdown(lines: &Lines<'_>, config: &ChunkConfig) -> Vec<Span> {
    let mut sections: Vec<(usize, Vec<String>)> = Vec::new();
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut fence: Option<&str> = None;
    sections.push((0, Vec::new()));
    for i in 0..lines.len() {
        let l = lines.line(i).trim_start();
        if let Some(f) = fence {
            if l.starts_with(f) {
                fence = None;
            }
            continue;
        }
        if l.starts_with("```") {
            fence = Some("```");
            continue;
        }
        if l.starts_with("~~~") {
            fence = Some("~~~");
            continue;
        }
        if let Some((level, title)) = heading(lines.line(i)) {
            while path.last().is_some_and(|(l, _)| *l >= level) {
                path.pop();
            }
            path.push((level, header_line(title).to_string()));
            sections.push((i, path.iter().map(|(_, t)| t.clone()).collect()));
        }
    }
    let mut spans = Vec::new();
    for (n, (start, context)) in sections.iter().enumerate() {
        let end = sections.get(n + 1).map_or(lines.len(), |s| s.0);
        if *start >= end || lines.blank(*start, end) {
            continue;
        }
        let budget = config.max_tokens.saturating_sub(lines.overhead(""));
        if lines.cost(*start, end) <= budget {
            spans.push(Span {
                start: *start,
                end,
                ty: ChunkType::Section,
                context: context.clone(),
                header: String::new(),
            });
        } else {
            // A long section: windows, each knowing its heading path.
            let header = context.join(" > ");
            spans.extend(windows(
                lines,
                *start,
                end,
                context,
                &header,
                config,
                ChunkType::Section,
            ));
        }
    }
    // Drop the blank lines at the end of each section.
    for s in &mut spans {
        while s.end > s.start + 1 && lines.line(s.end - 1).trim().is_empty() {
            s.end -= 1;
        }
    }
    merge_small(spans, lines, config)
}
