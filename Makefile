# Every target creates .venv from requirements.txt by itself on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
READY  := $(VENV)/.requirements-installed
PORT   ?= 8000

.PHONY: help book pdf test notebooks student nbgrader otter serve execute bench clean

help:
	@echo "make book     build the website into _build/html (warnings are errors) and its PDFs"
	@echo "make pdf      the same: the PDFs are in _build/html/pdf"
	@echo "make test     everything CI checks: package, notebooks, book, Colab, browser, student"
	@echo "make notebooks the learner edition in notebooks/ (what Colab opens): no solutions"
	@echo "make student  the student edition: _build/student/{notebooks,_build/html}"
	@echo "make nbgrader nbgrader course folder _build/nbgrader (CH=01 for one chapter)"
	@echo "make otter    Otter-Grader master notebooks in _build/otter (CH=01, COLAB=1 for Colab)"
	@echo "make serve    preview _build/html on http://127.0.0.1:$(PORT)"
	@echo "make execute  re-run notebooks, store their outputs, rewrite the learner edition"
	@echo "make bench    time each notebook; the masked/causal attention paths and half precision"

$(READY): requirements.txt requirements-nodeps.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps \
		-r requirements-nodeps.txt
	touch $@

book: $(READY)
	$(BIN)/python scripts/book.py

pdf: book

test: $(READY)
	$(BIN)/python -m pytest tests chapters templates --nbval -p no:cacheprovider -rs --durations=30

notebooks: $(READY)
	$(BIN)/python scripts/learner.py

student: notebooks
	$(BIN)/python scripts/student.py

nbgrader: $(READY)
	$(BIN)/python scripts/graders.py nbgrader $(CH)

otter: $(READY)
	$(BIN)/python scripts/graders.py otter $(CH) $(if $(COLAB),--colab)

serve: book
	$(BIN)/python -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

execute: $(READY)
	$(BIN)/python scripts/notebooks.py execute $(NB)
	$(BIN)/python scripts/learner.py

bench: $(READY)
	$(BIN)/python scripts/notebooks.py bench $(NB)
	$(BIN)/python scripts/bench_attention.py

clean:
	rm -rf _build
