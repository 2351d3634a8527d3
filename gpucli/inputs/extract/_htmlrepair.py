"""Broken HTML made readable before it is parsed: where an HTML5 parser, as a browser does,
would show markup as text or hide the rest of the page, the source is mended first.

An HTML5 parser repairs most breakage (an unclosed <p>, <li> or <td>, a stray end tag, a bare
'&'), but a few constructs swallow everything after them when never closed:

* raw-text elements (title, textarea, script, style, xmp, iframe, noembed, noframes, and
  plaintext, which never ends): their content is text up to their own end tag, so an unclosed
  <title> made the whole page its title, markup included ("<div", "<a href", "<td" in chunks),
  and an unclosed <script> hid the page. Without its end tag such an element ends where the next
  tag of HTML starts; written self-closed (<script src="a.js"/>, <title/>) it is empty.
* a comment never closed (<!-- without -->) ends at the first '>', as in pre-HTML5 browsers.
* a '<' that starts no element of HTML, SVG or MathML ("x<y", "#include <stdio.h>",
  "List<String>", "<john@example.org>") is text, not a tag that eats the words up to the next
  '>'; names with '-' (custom elements) or ':' (o:p, svg:rect) stay tags.
* elements whose subtree is dropped as a site's chrome (nav, aside, form, header, footer,
  noscript, template...) but that the page's markup opens more often than it closes: `repair`
  names them, so that their text is kept, since an unclosed <form> or <nav> holds the rest of
  the page.

Comments and raw-text elements are copied as they are (their content is not markup).
"""

from __future__ import annotations

import re
from collections import Counter

RAW_TEXT = ("title", "textarea", "script", "style", "xmp", "iframe", "noembed", "noframes", "plaintext")
_RAW_OR_COMMENT = re.compile(r"<!--|<(" + "|".join(RAW_TEXT) + r")(?=[\s/>])([^>]*)>", re.IGNORECASE)
_END = {name: re.compile(rf"</{name}(?=[\s/>]|\Z)", re.IGNORECASE) for name in RAW_TEXT}
_COMMENT_END = re.compile(r"--!?>")
_CUT_TAG = re.compile(r"<(?:[/!A-Za-z][^<>]*)?\Z")  # a tag cut short by the end: "...Minutes</ti"
_TAG = re.compile(r"<(/?[A-Za-z][^\s/>]*)")  # a tag's name, "/" first in an end tag
_ANY_TAG = re.compile(r"</?([A-Za-z][^\s/>]*)|<!--|<!doctype", re.IGNORECASE)

HTML_TAGS = frozenset("""
a abbr acronym address applet area article aside audio b base basefont bdi bdo bgsound big blink blockquote body
br button canvas caption center cite code col colgroup data datalist dd del details dfn dialog dir div dl dt em
embed fieldset figcaption figure font footer form frame frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html i
iframe image img input ins isindex kbd keygen label layer legend li link listing main map mark marquee menu
menuitem meta meter multicol nav nextid nobr noembed noframes nolayer noscript object ol optgroup option output p
param picture plaintext portal pre progress q rb rp rt rtc ruby s samp script search section select slot small
source spacer span strike strong style sub summary sup table tbody td template textarea tfoot th thead time title
tr track tt u ul var video wbr xmp
""".split())
SVG_TAGS = frozenset("""
svg altglyph altglyphdef altglyphitem animate animatecolor animatemotion animatetransform circle clippath
color-profile cursor defs desc ellipse feblend fecolormatrix fecomponenttransfer fecomposite feconvolvematrix
fediffuselighting fedisplacementmap fedistantlight fedropshadow feflood fefunca fefuncb fefuncg fefuncr
fegaussianblur feimage femerge femergenode femorphology feoffset fepointlight fespecularlighting fespotlight
fetile feturbulence filter font-face foreignobject g glyph glyphref hkern line lineargradient marker mask
metadata missing-glyph mpath path pattern polygon polyline radialgradient rect set stop switch symbol text
textpath tref tspan use view vkern
""".split())
MATHML_TAGS = frozenset("""
math maction maligngroup malignmark menclose merror mfenced mfrac mglyph mi mlabeledtr mlongdiv mmultiscripts mn
mo mover mpadded mphantom mprescripts mroot mrow ms mscarries mscarry msgroup msline mspace msqrt msrow mstack
mstyle msub msubsup msup mtable mtd mtext mtr munder munderover none semantics annotation annotation-xml
""".split())
KNOWN_TAGS = HTML_TAGS | SVG_TAGS | MATHML_TAGS


def repair(html: str, subtrees: frozenset[str]) -> tuple[str, set[str]]:
    """`html` with the constructs of the module doc mended (well-formed HTML comes back as it
    was, but for a '<' that starts no element, written '&lt;'), and which of `subtrees` (tag
    names, lower case) its markup opens more often than it closes."""
    out: list[str] = []
    tags: Counter[str] = Counter()  # "nav", "/nav": how often the markup opens and closes each tag
    at = 0
    while True:
        found = _RAW_OR_COMMENT.search(html, at)
        markup = html[at:found.start() if found else len(html)]
        names = _TAG.findall(markup)
        tags.update(map(str.lower, names))
        out.append(_text_angles(markup, names))
        if found is None:
            out[-1] = _CUT_TAG.sub("", out[-1])  # a document cut inside a tag ("...</", "<di")
            return "".join(out), {name for name in subtrees if tags["/" + name] < tags[name]}
        piece, at = _comment(html, found) if found.group(1) is None else _raw(html, found)
        out.append(piece)


def _comment(html: str, found: re.Match) -> tuple[str, int]:
    """A comment as it is, or ended at its first '>' when it has no end."""
    start = found.end()
    if html.startswith((">", "->"), start):  # <!--> and <!---> are empty comments
        end = html.index(">", start) + 1
        return html[found.start():end], end
    closing = _COMMENT_END.search(html, start)
    if closing is not None:
        return html[found.start():closing.end()], closing.end()
    first = html.find(">", start)
    if first < 0:  # cut off inside the comment: nothing after it to save
        return html[found.start():], len(html)
    return html[found.start():first] + "-->", first + 1


def _raw(html: str, found: re.Match) -> tuple[str, int]:
    """A raw-text element: as it is up to its end tag; empty when self-closed; else ended where
    the next tag of HTML starts."""
    name, attributes = found.group(1).lower(), found.group(2)
    if attributes.endswith("/"):
        return f"<{found.group(1)}{attributes[:-1]}></{name}>", found.end()
    ending = None if name == "plaintext" else _END[name].search(html, found.end())
    if ending is not None:
        return html[found.start():ending.start()], ending.start()
    end = _next_tag(html, found.end())
    content = html[found.end():end] if end < len(html) else _CUT_TAG.sub("", html[found.end():])
    opener = f"<xmp{attributes}>" if name == "plaintext" else found.group(0)
    return f"{opener}{content}</{'xmp' if name == 'plaintext' else name}>", end


def _next_tag(html: str, start: int) -> int:
    """Where the first tag of HTML (or a comment, or a doctype) after `start` begins; the end of
    `html` if none does."""
    for tag in _ANY_TAG.finditer(html, start):
        name = tag.group(1)
        if name is None or name.lower() in KNOWN_TAGS:
            return tag.start()
    return len(html)


def _text_angles(markup: str, tags: list[str]) -> str:
    """`markup` with each '<' that starts no known element written as '&lt;' (module doc); `tags`
    are the names of its tags ("p", "/p"). Markup with no unknown name, most pages', is returned
    as it is."""
    names = {name for name in set(tags)
             if name[0] != "/" and name.lower() not in KNOWN_TAGS and "-" not in name and ":" not in name}
    if not names:
        return markup
    words = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return re.sub(rf"<(?=(?:{words})[\s/>])", "&lt;", markup)  # at the very end: a tag cut short
