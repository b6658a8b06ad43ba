"""The programs that made the data files in data/, each run once by hand from the repository
root (`python -m tools.data.<name>`); data/README.md gives each file's command and checksum."""
