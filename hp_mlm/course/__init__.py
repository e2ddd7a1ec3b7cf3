"""The course's machinery, apart from the steps it teaches: exercise checks, quizzes, episode tables, pictures.

``checking`` (running a learner's function, verdicts), ``exercises`` and ``model_exercises`` (one
check per coded exercise of notebooks 01-02 and 03-04), ``episodes`` (minutes, schedules, quizzes),
``plots`` (a picture for each step). Imports the core; the core never imports it.
"""
