"""The decision engine: pure Python, no Django, Celery, Redis or kubernetes (see DESIGN.md §2)."""
