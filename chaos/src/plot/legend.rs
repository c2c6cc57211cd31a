//! A panel's legend, drawn in a column of its own beside the chart so it never hides a
//! line or a fault: one row per entry, a swatch (solid line, dashed line or shading) and
//! its label.

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{draw_error, PlotError, FONT};

/// How an entry is drawn in the chart.
#[derive(Debug, Clone, Copy)]
pub enum Swatch {
    Line(ShapeStyle),
    Dashed(ShapeStyle),
    Shade(ShapeStyle),
}

/// The entries of one panel, in the order they are listed.
#[derive(Debug, Clone, Default)]
pub struct Legend {
    entries: Vec<(String, Swatch)>,
}

const ROW: i32 = 20;
const SWATCH: i32 = 26;
const PAD: i32 = 8;

impl Legend {
    pub fn add(&mut self, label: impl Into<String>, swatch: Swatch) {
        self.entries.push((label.into(), swatch));
    }

    /// Draws the entries from the top left of `area`, framed.
    pub fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), PlotError> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let (width, _) = area.dim_in_pixel();
        let right = i32::try_from(width).unwrap_or(i32::MAX) - PAD;
        let rows = i32::try_from(self.entries.len()).unwrap_or(i32::MAX);
        let bottom = 2 * PAD + rows * ROW;
        area.draw(&Rectangle::new(
            [(0, 0), (right, bottom)],
            BLACK.mix(0.35).stroke_width(1),
        ))
        .map_err(draw_error)?;
        let text = TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        for (row, (label, swatch)) in (0..).zip(&self.entries) {
            let y = PAD + row * ROW + ROW / 2;
            let (left, end) = (PAD, PAD + SWATCH);
            match *swatch {
                Swatch::Line(style) => {
                    area.draw(&PathElement::new(vec![(left, y), (end, y)], style))
                }
                Swatch::Dashed(style) => area.draw(&DashedPathElement::new(
                    vec![(left, y), (end, y)],
                    5,
                    3,
                    style,
                )),
                Swatch::Shade(style) => {
                    area.draw(&Rectangle::new([(left, y - 7), (end, y + 7)], style))
                }
            }
            .map_err(draw_error)?;
            area.draw(&Text::new(label.as_str(), (end + PAD, y), text.clone()))
                .map_err(draw_error)?;
        }
        Ok(())
    }
}
