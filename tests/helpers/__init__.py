"""What several test files share: the browser and the built site's server (browser), running
every chapter two at a time (chapter_pool), the text of solutions that must never reach a
student (solution_text), and independent implementations the package is compared with
(rotary_reference, mla_reference)."""
