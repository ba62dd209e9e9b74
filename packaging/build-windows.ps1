# Build the Windows bundle (dist\hookscope\hookscope.exe), check and self-test it, then the setup .exe with Inno Setup.
#   powershell -ExecutionPolicy Bypass -File packaging\build-windows.ps1 [-Variant cpu|cuda] [-WithWeights resnet18]
#                                                                          [-NoSplash] [-PrintCommands]
# -Variant cpu (default): torch/torchvision from PyTorch's CPU index, pinned as in build.sh.
# -Variant cuda: PyPI's Windows torch is a CPU build, so the CUDA build comes from the index named by
#   $env:TORCH_CUDA_INDEX_URL (PyTorch's cuXXX index for this torch version); same pins.
# Untested here: this project's build machine is Linux (see the user guide, docs/installers.md).
param(
  [ValidateSet("cpu", "cuda")][string]$Variant = "cpu",
  [string[]]$WithWeights = @(),
  [switch]$NoSplash,
  [switch]$PrintCommands
)
$ErrorActionPreference = "Stop"
Set-Location (Split-Path $PSScriptRoot -Parent)
$TorchVersion = "2.14.1"
$TorchvisionVersion = "0.29.1"
$CpuIndexUrl = "https://download.pytorch.org/whl/cpu"
$Venv = "build\venv-$Variant"
$Py = "$Venv\Scripts\python.exe"

function Run([string]$Exe, [string[]]$Arguments) {
  Write-Host "$Exe $($Arguments -join ' ')"
  if (-not $PrintCommands) {
    & $Exe @Arguments
    if ($LASTEXITCODE -ne 0) { throw "failed ($LASTEXITCODE): $Exe $($Arguments -join ' ')" }
  }
}

if ($Variant -eq "cpu") {
  $IndexUrl = if ($env:TORCH_INDEX_URL) { $env:TORCH_INDEX_URL } else { $CpuIndexUrl }
  $Torch = @("-m", "pip", "install", "torch==$TorchVersion+cpu", "torchvision==$TorchvisionVersion+cpu", "--index-url", $IndexUrl)
} else {
  if (-not $env:TORCH_CUDA_INDEX_URL) { throw "-Variant cuda needs `$env:TORCH_CUDA_INDEX_URL (PyTorch's cuXXX index for torch $TorchVersion)" }
  $Torch = @("-m", "pip", "install", "torch==$TorchVersion", "torchvision==$TorchvisionVersion", "--index-url", $env:TORCH_CUDA_INDEX_URL)
}

Run "python" @("-m", "venv", $Venv)
Run $Py @("-m", "pip", "install", "--upgrade", "pip")
Run $Py $Torch
Run $Py @("-m", "pip", "install", ".[live]", "pyinstaller>=6.10,<7")  # live: OpenCV, for video files and cameras
if ($NoSplash) { $env:HOOKSCOPE_SPLASH = "0" } else {
  $env:HOOKSCOPE_SPLASH = "1"
  Run $Py @("-c", "import tkinter")  # the splash needs Tcl/Tk at build time (python.org's installer has it)
}
Remove-Item Env:HOOKSCOPE_WEIGHTS_DIR -ErrorAction SilentlyContinue
if ($WithWeights.Count -gt 0) {
  Run $Py (@("-m", "hookscope.core.models.bundled_weights", "build\weights") + $WithWeights)
  $env:HOOKSCOPE_WEIGHTS_DIR = "$PWD\build\weights"
}
# The user guide, shipped for Help > User guide (offline).
Run $Py @("-m", "pip", "install", ".[docs]")
Remove-Item -Recurse -Force build\guide -ErrorAction SilentlyContinue
$env:NO_MKDOCS_2_WARNING = "1"
Run $Py @("-m", "mkdocs", "build", "--strict", "--site-dir", "build\guide")
$env:HOOKSCOPE_GUIDE_DIR = "$PWD\build\guide"
Run $Py @("-m", "PyInstaller", "--noconfirm", "--clean", "--distpath", "dist", "--workpath", "build\pyinstaller-$Variant", "packaging\hookscope.spec")
if ($Variant -eq "cpu") { Run $Py @("packaging\bundle_checks.py", "no-cuda", "dist\hookscope") }
Run $Py @("packaging\bundle_checks.py", "max-size", "dist\hookscope")
Run $Py @("packaging\bundle_checks.py", "left-out", "dist\hookscope")
if ($PrintCommands) { exit 0 }
# A windowed app has no console: the self-test reports through its exit code and this file.
$env:HOOKSCOPE_SELF_TEST_REPORT = "$PWD\build\self-test.txt"
$p = Start-Process dist\hookscope\hookscope.exe -ArgumentList "--self-test" -Wait -PassThru
Get-Content $env:HOOKSCOPE_SELF_TEST_REPORT
if ($p.ExitCode -ne 0) { throw "self-test failed ($($p.ExitCode))" }
# Its OpenCV and FFmpeg play a video written here through the hooks.
Run $Py @("packaging\bundle_checks.py", "write-video", "build\check-video.avi")
$p = Start-Process dist\hookscope\hookscope.exe -ArgumentList @("live", "--video", "build\check-video.avi", "--layers", "layer1", "--frames", "2", "--unpaced", "--bare-runs", "1") -Wait -PassThru
if ($p.ExitCode -ne 0) { throw "video check failed ($($p.ExitCode))" }
$env:HOOKSCOPE_VERSION = (Select-String -Path app\hookscope\_version.py -Pattern '__version__ = "(.+)"').Matches[0].Groups[1].Value
$env:HOOKSCOPE_VARIANT = $Variant
# Inno Setup's compiler: on PATH, or where its installer puts it (it does not add itself to PATH).
$Iscc = (Get-Command iscc -ErrorAction SilentlyContinue).Source
if (-not $Iscc) { $Iscc = Join-Path ${env:ProgramFiles(x86)} "Inno Setup 6\ISCC.exe" }
if (-not (Test-Path $Iscc)) { throw "Inno Setup 6 is needed for the setup .exe (https://jrsoftware.org/isinfo.php, or: choco install innosetup)" }
Run $Iscc @("packaging\hookscope.iss")
$Setup = "dist\Hookscope-$($env:HOOKSCOPE_VERSION)-$Variant-setup.exe"
Run $Py @("packaging\bundle_checks.py", "sha256", $Setup)
