"""Run a function on every chapter, two at a time (CI has two cores).

Chapters that time their own code (`measure.best_seconds`) run alone afterwards,
so that no other notebook shares the CPU while they measure speed-ups.
"""

from concurrent.futures import ThreadPoolExecutor


def times_itself(chapter):
    return "best_seconds" in chapter.read_text()


def for_each_chapter(function, chapters, workers=2):
    """{chapter: function(chapter)}; an exception is kept as the value."""

    def attempt(chapter):
        try:
            return function(chapter)
        except Exception as error:  # reported by the test of that chapter
            return error

    shared = [chapter for chapter in chapters if not times_itself(chapter)]
    with ThreadPoolExecutor(workers) as pool:
        results = dict(zip(shared, pool.map(attempt, shared)))
    for chapter in chapters:
        if chapter not in results:
            results[chapter] = attempt(chapter)
    return results


def result_for(results, chapter):
    """The chapter's result; its exception raised again if it failed."""
    result = results[chapter]
    if isinstance(result, Exception):
        raise result
    return result
