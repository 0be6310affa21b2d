"""Leaderboard charts: Vega-Lite specs built with altair, drawn to static SVG by vl-convert
(no browser, no JavaScript in the site)."""

from __future__ import annotations

import re
from typing import Any

import altair as alt

from tasks.report.site.data import clean


def leaderboard_chart(group: list[dict[str, Any]], title: str) -> alt.LayerChart:
    """Each model's mean with its CI as a bar, the human baseline as a grey band with its mean as a line."""
    models = [r for r in group if not r["is_human"] and clean(r["mean"]) is not None]
    human = [r for r in group if r["is_human"] and clean(r["mean"]) is not None]
    order = [r["model"] for r in sorted(models, key=lambda r: -r["mean"])]
    data = alt.Data(values=[{k: clean(r[k]) for k in ("model", "mean", "ci_low", "ci_high", "n_papers")}
                            for r in models])
    y = alt.Y("model:N", sort=order, title=None)
    x = alt.X("mean:Q", title="mean score over papers", scale=alt.Scale(zero=False))
    layers: list[alt.Chart] = []
    if human:
        band = alt.Data(values=[{k: clean(human[0][k]) for k in ("mean", "ci_low", "ci_high")}])
        if human[0]["ci_low"] is not None and human[0]["ci_high"] is not None:
            layers.append(alt.Chart(band).mark_rect(color="#999999", opacity=0.25)
                          .encode(x="ci_low:Q", x2="ci_high:Q"))
        layers.append(alt.Chart(band).mark_rule(color="#666666", strokeDash=[4, 3]).encode(x="mean:Q"))
    layers.append(alt.Chart(data).mark_rule(color="#1f77b4", strokeWidth=2)
                  .encode(x="ci_low:Q", x2="ci_high:Q", y=y))
    layers.append(alt.Chart(data).mark_point(filled=True, size=70, color="#1f77b4").encode(x=x, y=y))
    return alt.layer(*layers).properties(title=title, width=480, height=max(60, 28 * len(models)))


def cost_quality_chart(points: list[dict[str, Any]], axis: str, metric: str) -> alt.LayerChart:
    """Each candidate model's mean (with its CI) against its cost per review: USD, or tokens when no
    model costs any dollars. Only models of known cost are given."""
    data = alt.Data(values=[{k: clean(r[k]) for k in ("model", "mean", "ci_low", "ci_high", axis)} for r in points])
    x = alt.X(f"{axis}:Q", title="USD per review" if axis == "usd_per_review" else "tokens per review")
    y = alt.Y("mean:Q", title=f"mean {metric}", scale=alt.Scale(zero=False))
    base = alt.Chart(data)
    return alt.layer(
        base.mark_rule(color="#1f77b4").encode(x=x, y=alt.Y("ci_low:Q"), y2="ci_high:Q"),
        base.mark_point(filled=True, size=70, color="#1f77b4").encode(x=x, y=y),
        base.mark_text(align="left", dx=6, dy=-6, fontSize=10).encode(x=x, y=y, text="model:N"),
    ).properties(title=f"cost and quality ({metric})", width=420, height=260)


# what XML 1.0 cannot hold (C0 controls but tab and line breaks, surrogates, U+FFFE / U+FFFF): one in a
# label makes vl-convert's SVG parser panic, which aborts the whole process
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_safe(spec: Any) -> Any:
    """`spec` (a Vega-Lite dict) with every string stripped of what XML cannot hold."""
    if isinstance(spec, str):
        return NOT_XML.sub("", spec)
    if isinstance(spec, dict):
        return {xml_safe(k): xml_safe(v) for k, v in spec.items()}
    if isinstance(spec, list):
        return [xml_safe(v) for v in spec]
    return spec


def to_svg(chart: alt.TopLevelMixin) -> str:
    import vl_convert as vlc

    return vlc.vegalite_to_svg(xml_safe(chart.to_dict()))
