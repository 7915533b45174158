"""The slide preview: slide and class map side by side, class colours measured against the stains' colours, and a
legend whose class names and areas are the ones the renderer reports."""
from __future__ import annotations

import itertools

import numpy as np

from worker.preview import (
    CONTRAST_COLORS,
    GAP,
    MIN_CLASS_DELTA_E,
    MIN_STAIN_DELTA_E,
    color_distance,
    display_colors,
    legend_entries,
    render_slide_preview,
    stain_distance,
    stain_gamut,
)

OLD_BUILTIN = [(0, 0, 0), (40, 90, 230), (230, 60, 40)]
"""The built-in model's own colours (worker/weights): hematoxylin-like blue, eosin/DAB-like red."""
CLASSES = ["background", "nuclei", "vessel"]


def test_the_stain_gamut_holds_the_stains_from_white_to_dark():
    gamut = {tuple(int(v) for v in c) for c in stain_gamut()}
    assert (255, 255, 255) in gamut  # unstained
    # One unit of hematoxylin alone: 255 * exp(-OD) per channel (Beer-Lambert), a lavender blue.
    assert (133, 127, 191) in gamut
    assert min(sum(c) for c in gamut) < 60  # and the darkest mixtures are near black


def test_every_contrast_colour_stands_out_from_every_stain_and_from_the_others():
    for c in CONTRAST_COLORS:
        assert stain_distance(c) >= MIN_STAIN_DELTA_E, (c, stain_distance(c))
    for a, b in itertools.combinations(CONTRAST_COLORS, 2):
        assert color_distance(a, b) >= MIN_CLASS_DELTA_E, (a, b)
    # The measure can fail: the old built-in colours are stain colours.
    assert stain_distance(OLD_BUILTIN[1]) < MIN_STAIN_DELTA_E and stain_distance(OLD_BUILTIN[2]) < MIN_STAIN_DELTA_E


def test_a_model_colour_is_kept_where_it_stands_out_and_replaced_where_it_hides_in_the_stain():
    assert display_colors(OLD_BUILTIN) == [(0, 0, 0), CONTRAST_COLORS[0], CONTRAST_COLORS[1]]
    green, cyan = (0, 200, 60), (0, 255, 255)
    assert display_colors([(0, 0, 0), (40, 90, 230), green, (230, 60, 40)]) == [(0, 0, 0), CONTRAST_COLORS[0], green,
                                                                                  cyan]
    # Two classes never share a colour, even when the model gives both the same standing-out one.
    shown = display_colors([(0, 0, 0), green, green])
    assert shown[1] == green and color_distance(shown[1], shown[2]) >= MIN_CLASS_DELTA_E


def _slide(h: int = 120, w: int = 160) -> tuple[np.ndarray, np.ndarray]:
    """An H&E-like thumbnail (eosin-pink stroma, hematoxylin-purple nuclei) and its class map."""
    thumb = np.full((h, w, 3), (236, 150, 200), np.uint8)
    labels = np.zeros((h, w), np.uint8)
    labels[20:40, 20:40] = 1
    thumb[20:40, 20:40] = (90, 60, 150)
    labels[70:100, 90:140] = 2
    thumb[70:100, 90:140] = (200, 90, 110)
    return thumb, labels


def test_the_preview_puts_slide_and_classes_side_by_side_with_a_legend_of_names_and_areas():
    thumb, labels = _slide()
    preview = render_slide_preview(thumb, labels, CLASSES, OLD_BUILTIN, class_area_um2=[0.0, 2.5e5, 1.2e6],
                                   tissue_area_um2=5.0e6, max_side=1024)
    assert [e.name for e in preview.legend] == ["nuclei", "vessel"]
    assert [e.area_mm2 for e in preview.legend] == [0.25, 1.2]
    assert [round(e.tissue_percent, 3) for e in preview.legend] == [5.0, 24.0]
    assert preview.legend[0].label() == "nuclei: 0.25 mm² (5.0 % of tissue)"
    h, w = thumb.shape[:2]
    img = preview.rgb
    assert img.shape[1] >= 2 * w + 3 * GAP and preview.boxes["classes"][0] == 2 * GAP + w  # side by side
    left, top, right, bottom = preview.boxes["slide"]
    assert (right - left, bottom - top) == (w, h)
    assert np.array_equal(img[top:bottom, left:right], thumb)  # the slide as it is, beside the classes
    cl, ct, cr, cb = preview.boxes["classes"]
    panel = img[ct:cb, cl:cr]
    for entry, k in zip(preview.legend, (1, 2)):
        assert entry.color == display_colors(OLD_BUILTIN)[k]
        painted = panel[labels == k].mean(axis=0)
        # Painted in its colour, and far from every stain colour where the slide was stained.
        assert color_distance(painted, entry.color) < 15, (entry.name, painted)
        assert stain_distance(painted) >= MIN_STAIN_DELTA_E - 10, (entry.name, painted)
        sl, st, sr, sb = preview.boxes[f"swatch:{entry.name}"]
        assert tuple(img[(st + sb) // 2, (sl + sr) // 2]) == entry.color  # the legend's swatch
    # The unclassified tissue is grey in the class panel: no stain colour competes with the classes.
    rest = panel[labels == 0].astype(int)
    assert np.abs(rest[:, 0] - rest[:, 2]).max() <= 1
    ll, lt, lr, lb = preview.boxes["legend"]
    assert (img[lt:lb, ll:lr].sum(axis=2) < 150).sum() > 200  # the legend's text is there


def test_the_legend_has_no_share_without_a_tissue_area():
    (entry,) = legend_entries(["background", "tumour"], [(0, 0, 0), (255, 230, 0)], [0, 3e6], 0.0)
    assert entry.tissue_percent is None and entry.label() == "tumour: 3 mm²"
