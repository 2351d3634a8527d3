"""Makes sample_data/docs/formats/: the same kind of texts as the rest of docs/, in document formats,
each written by a real writer (reportlab for PDF, python-docx, python-pptx; the HTML by hand, as a
web page is written). Run from the repository root: `python sample_data/make_documents.py`
(pip install reportlab python-docx python-pptx). The texts are the project's own (CC0), like the
rest of sample_data/docs.
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).parent / "docs" / "formats"

SOLAR_SYSTEM = [  # one list of paragraphs per PDF page
    ["The Solar System",
     "The Solar System is the Sun and everything bound to it by gravity: eight planets, their moons, dwarf "
     "planets such as Pluto and Ceres, and countless asteroids and comets. The Sun holds more than 99 percent "
     "of its mass.",
     "The four inner planets, Mercury, Venus, Earth and Mars, are small and rocky. Venus is the hottest planet "
     "because its thick carbon dioxide atmosphere traps heat. Mars is cold and dry, with the tallest volcano "
     "known, Olympus Mons."],
    ["The giant planets",
     "Beyond the asteroid belt lie the giants. Jupiter and Saturn are made mostly of hydrogen and helium. "
     "Jupiter's Great Red Spot is a storm larger than Earth that has raged for centuries.",
     "Uranus and Neptune are ice giants, rich in water, ammonia and methane. Uranus spins on its side, "
     "probably after an ancient collision. Neptune has the fastest winds measured on any planet."],
    ["Small worlds",
     "Comets are lumps of ice and dust from the outer Solar System. When one comes close to the Sun, its ice "
     "turns to gas and forms a glowing tail that always points away from the Sun.",
     "The Kuiper belt beyond Neptune holds Pluto and thousands of other icy bodies. Farther still, the Oort "
     "cloud is thought to be the source of comets with very long orbits."],
]

TEA = ("Tea", [
    "Tea is the second most consumed drink in the world after water. All true tea comes from one plant, "
    "Camellia sinensis, and the kinds differ in how the leaves are processed.",
    "Green tea is heated soon after picking, which stops oxidation and keeps a fresh, grassy taste. Black tea "
    "is fully oxidised and gives a dark, strong cup. Oolong lies between the two.",
], [("Kind", "Oxidation", "Brewing"), ("Green", "none", "80 degrees, 2 minutes"),
    ("Oolong", "partial", "90 degrees, 3 minutes"), ("Black", "full", "boiling, 4 minutes")])

VOLCANO_SLIDES = [
    ("How volcanoes work", "Magma rises from the mantle because it is lighter than the rock around it."),
    ("Kinds of eruption", "Runny basalt lava flows gently, as in Hawaii. Sticky, gas-rich magma explodes, "
                          "throwing ash high into the sky."),
    ("Living with volcanoes", "Volcanic soils are fertile, so many people farm near active volcanoes. "
                              "Monitoring of gases and small earthquakes gives warning of eruptions."),
]

LIGHTHOUSES = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Lighthouses</title>
<style>body { font-family: serif; } nav a { margin: 0 1em; }</style>
<script>window.addEventListener("load", function () { console.log("analytics"); });</script>
</head>
<body>
<nav><a href="/">Home</a> <a href="/coasts">Coasts</a> <a href="/about">About</a></nav>
<header><p>Coastal Heritage Society</p></header>
<article>
<h1>Lighthouses</h1>
<p>A lighthouse is a tower with a bright lamp that warns ships of <b>dangerous coasts</b>, reefs and
harbour entrances. The Pharos of Alexandria, built around 280 BC, was one of the Seven Wonders of the
Ancient World.</p>
<p>Early lighthouses burned wood or coal. In 1822 Augustin Fresnel invented a lens of concentric glass
rings that bends light into a narrow, powerful beam visible for more than 30 kilometres &mdash; a design
still in use today.</p>
<h2>Keepers</h2>
<p>For two centuries keepers lived at the lights, trimming wicks and winding the clockwork that turned
the lens. Today almost every lighthouse is automatic, and many keepers&rsquo; cottages are museums.</p>
</article>
<footer><p>&copy; Coastal Heritage Society. All rights reserved.</p></footer>
</body>
</html>
"""


def solar_system_pdf(path: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()
    story = []
    for number, (title, *paragraphs) in enumerate(SOLAR_SYSTEM):
        if number:
            story.append(PageBreak())
        story.append(Paragraph(title, styles["Heading1"]))
        story.extend(Paragraph(text, styles["BodyText"]) for text in paragraphs)
    SimpleDocTemplate(str(path), pagesize=A4, title="The Solar System", author="gpucli sample data",
                      invariant=1).build(story)


def tea_docx(path: Path) -> None:
    import docx

    title, paragraphs, rows = TEA
    document = docx.Document()
    document.add_heading(title, level=1)
    for text in paragraphs:
        document.add_paragraph(text)
    table = document.add_table(rows=len(rows), cols=len(rows[0]))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.core_properties.author = "gpucli sample data"
    document.save(str(path))


def volcano_pptx(path: Path) -> None:
    from pptx import Presentation

    deck = Presentation()
    for title, body in VOLCANO_SLIDES:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    deck.save(str(path))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    solar_system_pdf(OUT / "solar_system.pdf")
    tea_docx(OUT / "tea.docx")
    volcano_pptx(OUT / "volcanoes.pptx")
    (OUT / "lighthouses.html").write_text(LIGHTHOUSES, encoding="utf-8")
    for path in sorted(OUT.iterdir()):
        print(f"{path} {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
