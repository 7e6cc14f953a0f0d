# Django-style settings for the intranet app.   
import os

BASE_DIR = os.path.dirname(os.path.abspath(__file__))  
DEBUG = os.environ.get("DEBUG", "0") == "1"
ALLOWED_HOSTS = ["intranet.local", "localhost"] 

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",   
        "NAME": os.environ.get("DB_NAME", "intranet"),
        "HOST": os.environ.get("DB_HOST", "localhost"),
        "PORT": 5432,
    }
}

TIME_ZONE = "Europe/Berlin"
USE_TZ = True   
