# Every target creates .venv from requirements.txt by itself on a fresh machine; book and test
# first install the Debian packages they need (make system), and say so when they do.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
READY  := $(VENV)/.requirements-installed
PORT   ?= 8000

.PHONY: help system book pdf slides test notebooks classroom nbgrader otter exam serve execute bench \
	clean \
	colab-refresh
.PHONY: concepts

help:
	@echo "make system    install the Debian packages book and test need (Chromium, a CJK font),"
	@echo "               as root with apt-get; book and test run it first; fast when installed"
	@echo "make book      build the website into _build/html (warnings are errors) and its PDFs"
	@echo "make pdf       the same: the PDFs are in _build/html/pdf"
	@echo "make slides    every chapter's lecture slides (reveal.js, offline) in _build/html/slides"
	@echo "make test      everything CI checks: package, notebooks, book, Colab, browser, editions"
	@echo "make notebooks the learner edition in notebooks/ (what Colab opens): no solutions"
	@echo "make concepts  the concept checks' GIFT, Moodle XML and QTI exports into"
	@echo "               _build/html/concept-checks (make book writes them too)"
	@echo "make classroom the classroom edition, to host for a class: a website without solutions"
	@echo "               and the learner notebooks without links to them, in _build/classroom/"
	@echo "make nbgrader  nbgrader course folder _build/nbgrader (CH=01 for one chapter)"
	@echo "make otter     Otter-Grader master notebooks in _build/otter (CH=01, COLAB=1 for Colab)"
	@echo "make exam      the exam question bank, for instructors only, and a paper of its"
	@echo "               questions without answers, in _build/instructor/"
	@echo "               (a page and a PDF; never published: instructors.md)"
	@echo "make serve     preview _build/html on http://127.0.0.1:$(PORT)"
	@echo "make execute   re-run notebooks, store their outputs, rewrite the learner edition"
	@echo "make bench     time each notebook; the masked/causal attention paths and half precision"
	@echo "make colab-refresh  colab/runtime.txt from Google's list of Colab's library versions"
	@echo "               (FREEZE=path, clone or URL of googlecolab/backend-info's pip-freeze.txt)"

$(READY): requirements.txt requirements-nodeps.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps \
		-r requirements-nodeps.txt
	touch $@

# The tools run as modules from the repository root (python -m tools.NAME), which puts the
# root, and so the tools package, on their path.
system:
	@$(PYTHON) -m tools.system

book: system $(READY)
	$(BIN)/python -m tools.book

pdf: book

slides: $(READY)
	$(BIN)/python -m tools.slides

# Two processes (CI has two cores): conftest.py says how the tests are shared out, the longest
# first.
WORKERS ?= 2
test: system $(READY)
	$(BIN)/python -m pytest tests chapters templates --nbval -p no:cacheprovider -rs \
		--nbval-sanitize-with tests/nbval_sanitize.cfg \
		--durations=40 -n $(WORKERS) --dist loadscope --no-loadscope-reorder

notebooks: $(READY)
	$(BIN)/python -m tools.learner

concepts: $(READY)
	$(BIN)/python -m tools.concepts

classroom: system notebooks
	$(BIN)/python -m tools.classroom

nbgrader: $(READY)
	$(BIN)/python -m tools.graders nbgrader $(CH)

otter: $(READY)
	$(BIN)/python -m tools.graders otter $(CH) $(if $(COLAB),--colab)

exam: system $(READY)
	$(BIN)/python -m tools.exam

serve: book
	$(BIN)/python -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

execute: $(READY)
	$(BIN)/python -m tools.notebooks execute $(NB)
	$(BIN)/python -m tools.learner

bench: $(READY)
	$(BIN)/python -m tools.notebooks bench $(NB)
	$(BIN)/python -m tools.bench_attention

colab-refresh: $(READY)
	$(BIN)/python -m tools.colab_runtime refresh $(FREEZE)

clean:
	rm -rf _build
