/* The chapters' concept checks (_ext/course_concepts.py writes them into each chapter page).

   Each question is a .course-concept box: a fieldset (radio buttons, a number field, or one
   position menu per step), a Check button, a Show answer button and a live verdict. The answer
   is checked here, in the page; nothing is sent anywhere. */

(function () {
  "use strict";

  const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i;

  // "1,050,624", "1 050 624", "−0.5", "14.6%", "0,25" (a decimal comma) or "1.5 GiB" (the
  // question's own unit) -> the numbers it may mean: none for anything else (a different unit
  // included), two for a single comma before exactly three digits ("8,578": 8578 or 8.578).
  function readings(text, unit) {
    let t = text.trim().replace(/\u2212/g, "-");
    // the question's unit (or %) after the number, with or without a space
    const suffix = unit ? unit.toLowerCase() : "%";
    if (t.toLowerCase().endsWith(suffix)) t = t.slice(0, -suffix.length);
    t = t.replace(/[\s_]/g, "").replace(/%$/, "");
    // one comma before exactly three digits, no point: thousands or decimals, both are read
    const ambiguous = /^[^,.]*,\d{3}(?:[^\d,.][^,.]*)?$/.test(t);
    const texts = ambiguous ? [t.replace(",", ""), t.replace(",", ".")] : [commaRead(t)];
    return texts.filter((x) => NUMBER.test(x)).map(Number);
  }

  // a comma before exactly three digits groups thousands; any other single comma is a decimal one
  function commaRead(t) {
    t = t.replace(/,(?=\d{3}(?:\D|$))/g, "");
    if (!t.includes(".") && (t.match(/,/g) || []).length === 1) t = t.replace(",", ".");
    return t;
  }

  // true when the text is a number followed by some other unit than `unit` ("1024 MiB")
  function otherUnit(text, unit) {
    const match = text.trim().match(/^(.*\d)\s*([a-zµ][\w/µ]*)$/i);
    return Boolean(unit && match && readings(match[1], "").length);
  }

  // true (right), false (wrong), or a string asking for an answer first.
  const JUDGES = {
    choice(box) {
      const picked = box.querySelector("input[type=radio]:checked");
      return picked ? picked.value === box.dataset.answer : "Choose an option first.";
    },
    numeric(box) {
      const unit = box.dataset.unit || "";
      const typed = box.querySelector("input").value;
      const values = readings(typed, unit);
      if (!values.length) {
        if (otherUnit(typed, unit)) return `Give the answer in ${unit}.`;
        return unit
          ? `Type a number first, in ${unit}, such as 0.25 or 1024.`
          : "Type a number first, such as 0.25 or 1024.";
      }
      const right = Number(box.dataset.value);
      const slack = Number(box.dataset.tolerance) + 1e-9 * Math.abs(right);
      // right if any reading of the text is within the tolerance
      return values.some((value) => Math.abs(value - right) <= slack);
    },
    order(box) {
      const menus = [...box.querySelectorAll("select")];
      if (menus.some((m) => m.value === "")) return "Give every step a position first.";
      return menus.every((m) => m.value === m.dataset.position);
    },
  };

  function check(box) {
    const verdict = box.querySelector(".course-concept-verdict");
    const result = JUDGES[box.dataset.kind](box);
    box.classList.remove("is-right", "is-wrong");
    if (typeof result === "string") {
      verdict.textContent = result;
      return;
    }
    box.classList.add(result ? "is-right" : "is-wrong");
    const why = box.querySelector(".course-concept-explanation").textContent;
    verdict.textContent = result
      ? "Right. " + why
      : "Not right. Try again, or press Show answer.";
  }

  function toggleAnswer(box, button) {
    const answer = box.querySelector(".course-concept-answer");
    answer.hidden = !answer.hidden;
    button.setAttribute("aria-expanded", String(!answer.hidden));
    button.textContent = answer.hidden ? "Show answer" : "Hide answer";
  }

  function setUp(box) {
    const show = box.querySelector(".course-concept-show");
    box.querySelector(".course-concept-check").addEventListener("click", () => check(box));
    show.addEventListener("click", () => toggleAnswer(box, show));
    // Enter in the number field checks, as a form would, without submitting anything
    box.querySelectorAll("input[type=text]").forEach((field) =>
      field.addEventListener("keydown", (event) => {
        if (event.key === "Enter") {
          event.preventDefault();
          check(box);
        }
      }));
  }

  function start() {
    document.querySelectorAll(".course-concept").forEach(setUp);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
