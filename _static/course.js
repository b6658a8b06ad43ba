/* The course's additions to the theme's scripts (tests/test_site_controls.py tries each).

   Search (Sphinx's searchtools.js, which the theme loads on every page for its Ctrl+K box):
   - one result per page: a page matched by its title, by an index entry and by its text was
     listed up to three times; its best-scoring match is kept;
   - a result's summary shows maths as text ("NaN with -∞"), not as TeX ("\(-\infty\)"), and
     leaves out the page's contents lists and buttons. */

(function () {
  "use strict";

  // TeX commands a summary writes as one character.
  const SYMBOLS = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε",
    zeta: "ζ", eta: "η", theta: "θ", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν", xi: "ξ",
    pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", varphi: "φ", chi: "χ", psi: "ψ",
    omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Sigma: "Σ", Phi: "Φ",
    Psi: "Ψ", Omega: "Ω", infty: "∞", cdot: "·", times: "×", le: "≤", leq: "≤", ge: "≥",
    geq: "≥", ne: "≠", neq: "≠", approx: "≈", to: "→", rightarrow: "→", leftarrow: "←",
    in: "∈", sum: "Σ", prod: "Π", sqrt: "√", partial: "∂", nabla: "∇", odot: "⊙",
    otimes: "⊗", top: "⊤", ldots: "…", dots: "…", cdots: "⋯", pm: "±", mid: "|",
    exp: "exp", log: "log", ln: "ln", max: "max", min: "min", sin: "sin", cos: "cos",
    lfloor: "⌊", rfloor: "⌋", lceil: "⌈", rceil: "⌉", langle: "⟨", rangle: "⟩",
  };

  // "\(\frac{q^\top k}{\sqrt{d}}\)" -> "q^⊤ k/√d": TeX as a reader would type it.
  function texToText(tex) {
    let text = tex.replace(/^\s*(\\\(|\\\[|\$\$?)/, "").replace(/(\\\)|\\\]|\$\$?)\s*$/, "");
    text = text.replace(/\\([{}])/g, (match, brace) => (brace === "{" ? "\u0001" : "\u0002"));
    text = text.replace(/\\[tdc]?frac\s*(\w)\s*(\w)/g, "$1/$2");
    for (let i = 0; i < 3; i++) {
      text = text.replace(/\\[tdc]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}/g, "($1)/($2)");
      text = text.replace(
        /\\(?:text|mathrm|mathbf|mathit|mathcal|mathbb|boldsymbol|operatorname|textbf|bm)\s*\{([^{}]*)\}/g,
        "$1");
    }
    text = text.replace(/\\([A-Za-z]+)/g, (match, name) => SYMBOLS[name] ?? "");
    text = text.replace(/\\[,;:!> ]/g, " ").replace(/\\([{}%&_#$])/g, "$1");
    text = text.replace(/[{}]/g, "").replace(/\\/g, "");
    return text.replace(/\u0001/g, "{").replace(/\u0002/g, "}").replace(/\s+/g, " ").trim();
  }

  function patchSearch() {
    if (typeof Search === "undefined") return;

    const htmlToText = (htmlString, anchor) => {
      const html = new DOMParser().parseFromString(htmlString, "text/html");
      const dropped = [
        ".headerlink", "script", "style", "nav", ".bd-header-article",
        ".bd-sidebar-secondary", ".course-launch", ".toggle-button", ".copybtn",
      ];
      html.querySelectorAll(dropped.join(",")).forEach((e) => e.remove());
      html.querySelectorAll(".math").forEach((e) => {
        e.textContent = texToText(e.textContent);
      });
      const main = html.querySelector('[role="main"]');
      // An index entry's anchor is an empty target: its paragraph or section speaks.
      let part = anchor && main ? main.querySelector(anchor) : null;
      while (part && part !== main && part.textContent.trim().length < 80) {
        part = part.parentElement;
      }
      return (part || main || html.body).textContent.replace(/\s+/g, " ");
    };
    Search.htmlToText = htmlToText;

    const performSearch = Search._performSearch;
    Search._performSearch = (...args) => {
      // The results come best last (searchtools.js shows them with pop()): keep each
      // page's last, best, entry.
      const seen = new Set();
      const kept = [];
      for (const result of performSearch(...args).reverse()) {
        if (!seen.has(result[0])) {
          seen.add(result[0]);
          kept.push(result);
        }
      }
      return kept.reverse();
    };
  }

  window.courseTexToText = texToText;
  // searchtools.js loads after this script and searches when the page is ready: patch it
  // as soon as it is there, before its own ready handler runs.
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", patchSearch);
  } else {
    patchSearch();
  }
})();
