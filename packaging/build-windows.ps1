# Build the Windows bundle (dist\hookscope\hookscope.exe), self-test it, then the setup .exe with Inno Setup.
#   powershell -ExecutionPolicy Bypass -File packaging\build-windows.ps1
# CPU-only torch (much smaller): set $env:TORCH_INDEX_URL = "https://download.pytorch.org/whl/cpu" first.
$ErrorActionPreference = "Stop"
Set-Location (Split-Path $PSScriptRoot -Parent)
python -m venv build\venv
& build\venv\Scripts\python -m pip install --upgrade pip
if ($env:TORCH_INDEX_URL) { & build\venv\Scripts\python -m pip install torch torchvision --index-url $env:TORCH_INDEX_URL }
else { & build\venv\Scripts\python -m pip install torch torchvision }
& build\venv\Scripts\python -m pip install . pyinstaller
& build\venv\Scripts\pyinstaller --noconfirm --clean --distpath dist --workpath build\pyinstaller packaging\hookscope.spec
# A windowed app has no console: the self-test reports through its exit code and this file.
$env:HOOKSCOPE_SELF_TEST_REPORT = "$PWD\build\self-test.txt"
$p = Start-Process dist\hookscope\hookscope.exe -ArgumentList "--self-test" -Wait -PassThru
Get-Content $env:HOOKSCOPE_SELF_TEST_REPORT
if ($p.ExitCode -ne 0) { throw "self-test failed ($($p.ExitCode))" }
$env:HOOKSCOPE_VERSION = (Select-String -Path app\__init__.py -Pattern '__version__ = "(.+)"').Matches[0].Groups[1].Value
iscc packaging\hookscope.iss
